"""A config from YAML and overrides, checked against the components it names.

[`fedcore.core.config`][fedcore.core.config] is the schema; this module adds what needs the
components: each axis's name resolved in its registry and its hyper-parameters validated, every
component's declared requirements
([`fedcore.core.component.requirements`][fedcore.core.component.requirements]) checked
against the whole config, the code record of a model given by import path, and the engine
choice. All errors are one-line [`ConfigError`][fedcore.core.config.ConfigError] s raised
before any compute.
"""

from __future__ import annotations

import copy
import functools
import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedcore.core.component.registry import Registry
from fedcore.core.component.requirements import Need, Requirement, SendsUpdate
from fedcore.core.compose.resolve import Inherited
from fedcore.core.config import (
    ExperimentConfig,
    limits,
    load_method,
    parse_overrides,
    read_yaml,
    set_dotted,
)
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.messages import one_line as _one_line

log = logging.getLogger("fedcore")
# The registries (and torch, which the components import) load on the first component check,
# not with this module: `fedcore --help` and a schema error stay fast.



def build_config(raw: dict[str, Any], overrides: dict[str, Any] | None = None) -> ExperimentConfig:
    """Apply overrides to ``raw``, resolve the method by name, and validate everything.

    Args:
        raw: the experiment as a nested mapping (a YAML file's content; missing keys take the
            defaults of `configs/experiment.yaml`).
        overrides: dotted keys and their values (``{"rounds": 3, "method.server_lr": 0.5}``),
            applied after ``raw``; ``method.*`` keys after the method is resolved by name.

    Returns:
        The validated config.

    Raises:
        ConfigError: a bad key or value, named in one line with the values allowed.
    """
    if not isinstance(raw, dict):  # [1, 2] raised AttributeError
        raise ConfigError(f"config: expected a mapping of keys to values (got a "
                          f"{type(raw).__name__})")
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"overrides: expected a mapping of dotted keys to values (got a "
                          f"{type(overrides).__name__})")
    limits.check_tree(raw)
    limits.check_tree(overrides or {})
    tree = copy.deepcopy(raw)
    overrides = dict(overrides or {})
    if isinstance(tree.get("engine"), str):  # shorthand engine: vectorised
        tree["engine"] = {"backend": tree["engine"]}
    if isinstance(overrides.get("engine"), str):  # shorthand engine=vectorised
        overrides["engine.backend"] = overrides.pop("engine")
    method_over = {k: v for k, v in overrides.items() if k.startswith("method.")}
    for key, value in overrides.items():
        if key not in method_over:
            set_dotted(tree, key, value)
    method = tree.get("method", "fedavg")
    if isinstance(method, str):
        tree["method"] = load_method(method)
        origin = f"method {limits.shown(method)}"
    elif isinstance(method, dict):
        origin = "the config's method block"
    else:
        raise ConfigError("method: expected a method name or a mapping")
    for key, value in method_over.items():
        set_dotted(tree, key, value)
    limits.check_tree(tree)
    try:
        cfg = ExperimentConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    _validate_method(cfg, Inherited(origin, frozenset(method_over)))
    check_requirements(cfg)
    from fedcore.core.privacy.checks import check_privacy

    check_privacy(cfg)
    from fedcore.core.models.external import record_code

    record_code(cfg)
    from fedcore.core.engines.select import check_engine

    check_engine(cfg)
    return cfg


def load_config(
    path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> ExperimentConfig:
    """Load a YAML experiment (defaults when ``path`` is None) with ``key=value`` overrides.

    Args:
        path: the experiment's YAML file; None for the default experiment.
        overrides: ``["key=value", ...]`` strings as on the command line (values parsed as
            YAML), or a mapping of dotted keys as in [`build_config`][fedcore.api.build_config].

    Returns:
        The validated config.

    Raises:
        ConfigError: a bad key or value, named in one line with the values allowed.
    """
    raw = read_yaml(path) if path is not None else {}
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    return build_config(raw, overrides)


def _validate_method(cfg: ExperimentConfig, inherited: Inherited | None = None) -> None:
    """Resolve every axis's components by name, in the order of ``AXES``, and replace each
    value by the validated one; ``inherited`` names where a key that a component lacks came
    from."""
    from fedcore.core.compose.axes import AXES

    for axis in AXES:
        if axis.resolve is not None:
            axis.store(cfg, axis.resolve(axis, axis.value(cfg), cfg, inherited or Inherited()))


def component_specs(cfg: ExperimentConfig) -> list[tuple[Registry[Any], dict[str, Any]]]:
    """Every component of a resolved ``cfg`` as (its kind's registry, its spec), in one list in
    the order of ``AXES``: the client objective, the rule, the compressor and its error
    feedback, the sampler, the stages and the callbacks."""
    from fedcore.core.compose.axes import AXES

    return [(axis.registry, spec) for axis in AXES for spec in axis.specs(cfg)]


def check_requirements(cfg: ExperimentConfig) -> None:
    """Every component's declared requirements against ``cfg``, all kinds in one loop: the
    first one broken is raised as its one-line ConfigError (warnings are logged and do not stop
    the load)."""
    tree = cfg.resolved()
    for registry, spec in component_specs(cfg):
        cls = registry.get(spec[registry.key])
        for need in cls.requirements(registry.hparams(spec)):
            _check(need, tree, cfg)


def _value(tree: dict[str, Any], key: str, cfg: ExperimentConfig) -> Any:
    """The value of dotted ``key`` in the resolved ``tree`` (a key left out of it while at
    its default, e.g. ``dataset.val_fraction``, read from ``cfg``)."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            break
        node = node[part]
    else:
        return node
    obj: Any = cfg
    for part in key.split("."):
        if not hasattr(obj, part) or isinstance(obj, dict):
            raise ValueError(f"a component declares a requirement on {key!r}, not a config key")
        obj = getattr(obj, part)
    return obj


@functools.lru_cache(maxsize=256)
def _warn_once(message: str) -> None:
    """A requirement's warning, once per process (a sweep builds its configs many times)."""
    log.warning("%s", message)


def _check(need: Need, tree: dict[str, Any], cfg: ExperimentConfig) -> None:
    if isinstance(need, SendsUpdate):
        reason = _sends_update(need, cfg)
        if reason is not None:
            raise ConfigError(reason)
        return
    assert isinstance(need, Requirement)
    values = [_value(tree, key, cfg) for key in need.keys]
    if need.holds(*values):
        return
    if need.warn_only:
        _warn_once(need.refusal(*values))
        return
    raise ConfigError(need.refusal(*values))


def _sends_update(need: SendsUpdate, cfg: ExperimentConfig) -> str | None:
    """Why the client objective whose update reaches the server is not ``need.algorithm``."""
    from fedcore.core.clients.base import REGISTRY as CLIENTS

    spec = cfg.method.client
    cls = CLIENTS.get(spec[CLIENTS.key])
    sender, _ = cls.update_objective(CLIENTS.hparams(spec))
    if sender == need.algorithm:
        return None
    got = repr(cls.name) if sender == cls.name else cls.wrapping(sender) or repr(sender)
    alternatives = [
        form for other in sorted(CLIENTS.classes().values(), key=lambda c: c.name)
        if (form := other.wrapping(need.algorithm)) is not None
    ]
    alt = f" (or {' or '.join(alternatives)})" if alternatives else ""
    return (f"method.client.algorithm: rule {need.rule} needs client {need.algorithm!r}{alt}, "
            f"got {got}")

