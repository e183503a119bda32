"""How an axis's value in a config is resolved: the component named, its hyper-parameters
validated, defaults filled in, one-line errors. ``single`` (one spec) and ``many`` (a list of
specs) serve any kind; ``compression`` and ``sampler`` add their kind's own rules. The table
that picks one per kind is ``fedcore.core.compose.axes.AXES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from fedcore.core.component.registry import Registry
from fedcore.core.component.spec import resolve_one
from fedcore.core.config import limits
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.messages import one_line as _one_line

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig


class Place(Protocol):
    """What a resolver reads of its axis (``fedcore.core.compose.axes.Axis``)."""

    @property
    def registry(self) -> Registry[Any]: ...

    @property
    def where(self) -> str: ...

    @property
    def check(self) -> Callable[[Any, str], object] | None: ...


@dataclass(frozen=True)
class Inherited:
    """Where a method's blocks came from (``method fedavg``) and the ``method.*`` keys that
    overrides set, to say which keys a component was given without the user writing them."""

    origin: str = "the method"
    overridden: frozenset[str] = frozenset()

    def unknown_key(self, prefix: str, key: str, name: str, field: str,
                    allowed: list[str]) -> str | None:
        """The error for ``prefix.field``, unknown to component ``name``, when the user only
        swapped the component (``prefix.key=name``) and ``field`` came with the block."""
        if (f"{prefix}.{key}" not in self.overridden or prefix in self.overridden
                or f"{prefix}.{field}" in self.overridden):
            return None
        return (f"{prefix}.{field}: not a key of {key} {name}; it came with the "
                f"{prefix.split('.')[-1]} block of {self.origin} (only {prefix}.{key} was "
                f"overridden); allowed: {', '.join(allowed)}; set the whole block instead, "
                f"e.g. {prefix}={{{key}: {name}}}")


Resolver = Callable[[Place, Any, "ExperimentConfig", Inherited], Any]


def single(axis: Place, value: Any, cfg: ExperimentConfig, inherited: Inherited) -> Any:
    """One required spec ``{key: NAME, **hparams}`` (a key that came with the method's block
    but not with the component swapped in is named as such)."""
    registry, prefix = axis.registry, axis.where
    spec = dict(value)
    name = spec.get(registry.key)
    if name is None:
        raise ConfigError(
            f"{prefix}.{registry.key}: missing; allowed: {', '.join(registry.names())}"
        )
    if not isinstance(name, str):
        raise ConfigError(f"{prefix}.{registry.key}: expected a name (got {limits.shown(name)})")
    try:
        component = registry.get(name)  # built-in, entry point or module:Class
        hp = registry.hparams(spec)
    except KeyError as exc:
        raise ConfigError(f"{prefix}.{registry.key}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        message = None
        if err["type"] == "extra_forbidden":
            message = inherited.unknown_key(prefix, registry.key, name, str(err["loc"][0]),
                                            [registry.key, *component.HParams.model_fields])
        raise ConfigError(message or _one_line(exc, prefix, component.HParams)) from None
    if axis.check is not None:
        axis.check(component, prefix)
    return {registry.key: name, **hp.model_dump(mode="json")}


def many(axis: Place, value: Any, cfg: ExperimentConfig, inherited: Inherited) -> Any:
    """A list of specs ``[{key: NAME, **hparams}]`` in order, None when there is none."""
    key = axis.registry.key
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise ConfigError(f"{axis.where}: expected a list of {{{key}: NAME, ...}} "
                          f"(got {limits.shown(value)})")
    out = []
    for i, spec in enumerate(value):
        where = f"{axis.where}[{i}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a mapping {{{key}: NAME, ...}} "
                              f"(got {limits.shown(spec)})")
        resolved = resolve_one(spec, where, axis.registry)
        if axis.check is not None:
            axis.check(axis.registry.get(resolved[key]), where)
        out.append(resolved)
    return out


def compression(axis: Place, value: Any, cfg: ExperimentConfig, inherited: Inherited) -> Any:
    """The flat compressor and error-feedback mapping
    (``fedcore.core.stages.compression_spec``)."""
    from fedcore.core.stages.compression_spec import resolve_compression

    return resolve_compression(dict(value))


def sampler(axis: Place, value: Any, cfg: ExperimentConfig, inherited: Inherited) -> Any:
    """The sampler spec, checked against the clients it may draw from (None: the default)."""
    from fedcore.core.samplers import resolve_sampler

    training = cfg.dataset.num_clients - cfg.dataset.held_out_count()
    return resolve_sampler(value, training, cfg.clients_per_round)
