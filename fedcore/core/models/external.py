"""Models from outside fedcore: a class or factory by import path (``model.name=pkg.mod:Net``)
or passed from Python (a class, a factory or an ``nn.Module`` instance).

An import path must name an ``nn.Module`` subclass or a factory, a ``def`` whose return
annotation is an ``nn.Module`` subclass; this is checked before anything is called, so a config
(``model.name=subprocess:getoutput``) cannot make fedcore call an arbitrary function. Importing
the named module still runs its top-level code: name only modules you trust.

A class or factory is called with ``model.kwargs`` as keyword arguments, plus ``in_shape``
(the shape of one sample) and ``num_classes`` when its signature names them; it is called under
the run's seeded generator, so its initial weights follow from the seed. An instance is used as
given (a deep copy), its initial weights recorded as ``model.weights``. ``model.code`` records
the digest of the file that defines the class or factory and the version of the distribution
named like its top-level package.

What the config records of a factory passed from Python:

- a class or a function defined at a module's top level: ``model.name`` is its import path;
- ``functools.partial(f, key=value, ...)`` of such an ``f``, keyword arguments only, plain values:
  ``model.name`` is ``f``'s path and ``model.kwargs`` the keywords (the config rebuilds it);
- anything else callable (a lambda, a closure, a bound method, a callable object, a partial
  with positional arguments): ``model.name`` is its ``module:qualname`` as Python spells it
  (``__main__:<lambda>``, ``train:make.<locals>.net``; ``<bound>``, ``<instance>``,
  ``<partial>`` mark the other kinds), which no import reaches, and ``model.weights`` the
  digest of the initial weights it built under the run's seed, so the config hash tells two
  such factories apart when their models differ in architecture or initial weights.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import re
import sys
import typing
from collections.abc import Callable
from importlib import metadata
from typing import Any

import torch
from torch import nn

from fedcore.core.config import GIVEN_FACTORY, IMPORT_PATH, ConfigError, ExperimentConfig

ModelFactory = Callable[..., nn.Module]
ModelArg = nn.Module | ModelFactory


def is_import_path(name: str) -> bool:
    return bool(IMPORT_PATH.match(name))


def resolve(path: str, key: str = "model.name") -> Any:
    """The model class or factory at ``module:attr`` (``attr`` may be dotted), checked to be
    one before anything is called (``check_model_kind``); a one-line ``ConfigError``
    naming ``key``, the module and the cause when the import fails or the object is of
    another kind."""
    from fedcore.core.component.loading import ComponentError, import_object

    try:
        obj = import_object(path)
    except ComponentError as exc:
        raise ConfigError(f"{key}: {exc.args[0]}") from None
    check_model_kind(obj, path, key)
    return obj


def check_model_kind(obj: Any, path: str, key: str = "model.name") -> None:
    """Whether ``obj`` is what a model import path may name, decided without calling it: a
    class subclassing ``nn.Module``, or a plain Python function (``def``) whose return
    annotation names an ``nn.Module`` subclass (``def net(...) -> nn.Module``). Anything else
    (a built-in such as ``os.system``, a function without that annotation, a ``partial``, an
    instance with ``__call__``) is refused, so a config cannot make fedcore call it."""
    if isinstance(obj, type):
        if issubclass(obj, nn.Module):
            return
        raise ConfigError(f"{key}: {path!r} is a class but not an nn.Module subclass")
    if inspect.isfunction(obj) and _returns_module(obj):
        return
    raise ConfigError(
        f"{key}: {path!r} is not an nn.Module subclass or a model factory (a def whose return "
        "annotation is an nn.Module subclass, e.g. def net(...) -> nn.Module); it is not called"
    )


def _returns_module(fn: Callable[..., Any]) -> bool:
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001  (an annotation that does not evaluate names no module)
        return False
    return isinstance(hint, type) and issubclass(hint, nn.Module)


def path_of(obj: Any) -> str:
    """``module:qualname`` of a class or function."""
    return f"{obj.__module__}:{obj.__qualname__}"


def code_record(obj: Any) -> str:
    """Which code defines ``obj``: the sha256 of its source file (16 hex characters) and the
    version of the installed distribution named like its top-level package, when there is one."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    try:
        source = inspect.getsourcefile(module) if module is not None else None
    except TypeError:
        source = None
    parts = []
    if source:
        with open(source, "rb") as fh:
            parts.append(f"file sha256:{hashlib.sha256(fh.read()).hexdigest()[:16]}")
    else:
        parts.append("no source file")
    version = distribution_version((getattr(obj, "__module__", None) or "").split(".")[0])
    if version:
        parts.append(version)
    return "; ".join(parts)


@functools.lru_cache(maxsize=64)
def distribution_version(top: str) -> str | None:
    """``name version`` of the installed distribution named like the top-level package, if any
    (a cheap lookup by name, not a scan of every installed distribution)."""
    try:
        return f"{top} {metadata.version(top)}"
    except metadata.PackageNotFoundError:
        return None


def weights_digest(model: nn.Module) -> str:
    """sha256 (16 hex characters) of a module's state_dict: names, shapes, dtypes and values."""
    h = hashlib.sha256()
    for name, value in model.state_dict().items():
        t = value.detach().cpu().contiguous()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def call_factory(
    factory: ModelFactory,
    kwargs: dict[str, Any],
    in_shape: tuple[int, ...],
    num_classes: int,
    label: str,
) -> nn.Module:
    """``factory(**kwargs)`` with ``in_shape``/``num_classes`` added where its signature names
    them; the result must be an ``nn.Module`` (one-line ``ConfigError`` otherwise)."""
    args = dict(kwargs)
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    for name, value in (("in_shape", tuple(in_shape)), ("num_classes", int(num_classes))):
        if name in params and name not in args:
            args[name] = value
    try:
        model = factory(**args)
    except TypeError as exc:
        raise ConfigError(f"model.kwargs: {label}({', '.join(args)}) failed: {exc}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model.name: {label} returned {type(model).__name__}, not an nn.Module")
    return model


def _plain(value: Any) -> bool:
    """A value a YAML config holds as it is (so ``model.kwargs`` can record it)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _named(obj: Any) -> str | None:
    """``module:qualname`` of a class or a function defined at a module's top level (or in a
    class body), else None."""
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return None
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    path = f"{module}:{qualname}"
    return path if is_import_path(path) else None


def _opaque_label(obj: Any) -> tuple[str, Any]:
    """(``module:qualname<kind>``, the object whose defining file is recorded) of a factory
    that no import path names."""
    if isinstance(obj, functools.partial):
        inner, _ = _opaque_label(obj.func)
        return (inner if "<" in inner else f"{inner}<partial>"), _code_owner(obj.func)
    if inspect.ismethod(obj):
        return f"{obj.__func__.__module__}:{obj.__func__.__qualname__}<bound>", obj.__func__
    if inspect.isfunction(obj) or inspect.isclass(obj):
        return f"{obj.__module__}:{obj.__qualname__}", obj
    cls = type(obj)  # a callable object
    return f"{cls.__module__}:{cls.__qualname__}<instance>", cls


def _code_owner(obj: Any) -> Any:
    while isinstance(obj, functools.partial):
        obj = obj.func
    return getattr(obj, "__func__", obj) if inspect.ismethod(obj) else obj


def factory_fields(model: ModelFactory) -> tuple[dict[str, Any], Any]:
    """The ``model`` fields that record a factory passed from Python, and the object whose code
    is recorded (see the module docstring). ``weights`` is left to ``is_opaque`` callers."""
    path = _named(model)
    if path is not None:
        return {"name": path, "weights": None}, model
    if isinstance(model, functools.partial) and not model.args:
        inner = _named(model.func)
        if inner is not None and _plain(dict(model.keywords)):
            return {"name": inner, "kwargs": dict(model.keywords), "weights": None}, model.func
    label, owner = _opaque_label(model)
    label = re.sub(r"[^\w.:<>]", "_", label)  # e.g. a module named by a file with a dash
    return {"name": label, "weights": None}, owner


def is_opaque(model: ModelArg | None) -> bool:
    """A factory passed from Python whose config cannot rebuild it (its initial weights are
    then recorded as ``model.weights`` once built)."""
    if model is None or isinstance(model, nn.Module):
        return False
    return not is_import_path(factory_fields(model)[0]["name"])


def config_with_model(cfg: ExperimentConfig, model: ModelArg) -> ExperimentConfig:
    """``cfg`` saying truthfully which model a Python caller passed (its class or factory path,
    code record, and for an instance the digest of its initial weights; for a factory that no
    import path names, ``with_initial_weights`` adds that once it is built)."""
    source: Any
    update: dict[str, Any]
    if isinstance(model, nn.Module):
        label, source = path_of(type(model)), type(model)
        update = {"name": label, "kwargs": {}, "weights": weights_digest(model)}
    elif callable(model):
        update, source = factory_fields(model)
    else:
        raise ConfigError(
            f"model: expected an nn.Module, a class or a factory (got {type(model).__name__})"
        )
    fields = {**cfg.model.model_dump(), **update, "code": code_record(source)}
    return cfg.model_copy(update={"model": type(cfg.model).model_validate(fields)})


def with_initial_weights(cfg: ExperimentConfig, model: nn.Module) -> ExperimentConfig:
    """``cfg`` with ``model.weights`` the digest of ``model``'s initial weights."""
    fields = {**cfg.model.model_dump(), "weights": weights_digest(model)}
    return cfg.model_copy(update={"model": type(cfg.model).model_validate(fields)})


def record_code(cfg: ExperimentConfig) -> None:
    """Import a model given by import path (one-line error if that fails) and set
    ``model.code`` to the code record of what it names; a config names no instance, so
    ``model.weights`` is cleared (fedcore sets both, a config's own values are not kept)."""
    cfg.model.code = code_record(resolve(cfg.model.name)) if is_import_path(cfg.model.name) \
        else None
    cfg.model.weights = None


def instantiate(
    cfg: ExperimentConfig,
    given: ModelArg | None,
    in_shape: tuple[int, ...],
    num_classes: int,
) -> nn.Module:
    """The model of ``cfg`` (``given``: the one passed from Python), freshly built."""
    if isinstance(given, nn.Module):
        return copy.deepcopy(given)
    if given is not None:
        return call_factory(given, cfg.model.kwargs, in_shape, num_classes, cfg.model.name)
    return build(cfg.model.name, cfg.model.kwargs, cfg.model.norm, in_shape, num_classes)


def build(
    name: str, kwargs: dict[str, Any], norm: str, in_shape: tuple[int, ...], num_classes: int
) -> nn.Module:
    """A built-in model by name, or a class or factory by import path called with ``kwargs``."""
    from fedcore.core.models import build_model

    if is_import_path(name):
        return call_factory(resolve(name), kwargs, in_shape, num_classes, name)
    if GIVEN_FACTORY.match(name):
        raise ConfigError(
            f"model.name: {name!r} is a factory that was passed from Python (a lambda, a closure, "
            "a bound method), which no import path reaches; pass it again: "
            "Simulation(cfg, model=...)"
        )
    if len(in_shape) != 3:
        raise ConfigError(
            f"model.name: {name!r} needs samples shaped (C, H, W), the data's are "
            f"{tuple(in_shape)}; give your own model (model.name=package.module:Name)"
        )
    shape = (int(in_shape[0]), int(in_shape[1]), int(in_shape[2]))
    return build_model(name, shape, num_classes, norm=norm)
