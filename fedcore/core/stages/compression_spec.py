"""One flat ``method.compression`` mapping split into the compressor's keys and the chosen
error-feedback variant's keys, each validated against its own ``HParams``."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from fedcore.core.compression.base import REGISTRY as COMPRESSORS
from fedcore.core.config.errors import ConfigError
from fedcore.core.config.limits import shown
from fedcore.core.stages.feedback.base import REGISTRY as FEEDBACK

PREFIX = "method.compression"


def split(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """({compressor: NAME, **its keys}, {error_feedback: NAME, **its keys}) of a flat spec whose
    names resolve; a key of neither is left in the first (its HParams then refuses it)."""
    spec = dict(spec)
    comp = {"compressor": spec.pop("compressor")}
    ef = {"error_feedback": spec.pop("error_feedback", "none")}
    ef_keys = set(FEEDBACK.get(ef["error_feedback"]).HParams.model_fields)
    for key, value in spec.items():
        (ef if key in ef_keys else comp)[key] = value
    return comp, ef


def _one_line(exc: ValidationError, what: str) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    got = f" (got {shown(err['input'])})" if "input" in err and not isinstance(
        err["input"], dict) else ""
    return f"{PREFIX}.{key}: {msg}{got} ({what})"


def resolve_compression(spec: dict[str, Any]) -> dict[str, Any]:
    """The canonical flat mapping: compressor, its knobs, error_feedback, the variant's knobs
    (defaults filled in). A key that acts only with another variant, or with none, is a
    one-line ``ConfigError`` naming the allowed keys."""
    name = spec.get("compressor")
    if not isinstance(name, str):
        got = "missing" if name is None else f"expected a name (got {shown(name)})"
        raise ConfigError(f"{PREFIX}.compressor: {got}; allowed: {', '.join(COMPRESSORS.names())}")
    variant = spec.get("error_feedback", "none")
    if not isinstance(variant, str):
        raise ConfigError(f"{PREFIX}.error_feedback: expected a name (got {shown(variant)})")
    try:
        comp_cls = COMPRESSORS.get(name)
    except KeyError as exc:
        raise ConfigError(f"{PREFIX}.compressor: {exc}") from None
    try:
        ef_cls = FEEDBACK.get(variant)
    except KeyError as exc:
        raise ConfigError(f"{PREFIX}.error_feedback: {exc}") from None
    comp_keys, ef_keys = list(comp_cls.HParams.model_fields), list(ef_cls.HParams.model_fields)
    allowed = ["compressor", *comp_keys, "error_feedback", *ef_keys]
    for key in spec:
        if key in allowed:
            continue
        users = [v for v in FEEDBACK.names() if v != variant and _has_key(v, key)]
        where = f"{name} with error_feedback={variant}"
        if users:
            raise ConfigError(
                f"{PREFIX}.{key}: acts only with error_feedback={'|'.join(users)} "
                f"(got {variant!r}); allowed keys for {where}: {', '.join(allowed)}"
            )
        raise ConfigError(f"{PREFIX}.{key}: unknown key; allowed keys for {where}: "
                          f"{', '.join(allowed)}")
    comp, ef = split(spec)
    try:
        comp_hp = COMPRESSORS.hparams(comp)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, f"compressor {name}")) from None
    try:
        ef_hp = FEEDBACK.hparams(ef)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, f"error_feedback {variant}")) from None
    return {
        "compressor": name, **comp_hp.model_dump(mode="json"),
        "error_feedback": variant, **ef_hp.model_dump(mode="json"),
    }


def _has_key(variant: str, key: str) -> bool:
    try:
        return key in FEEDBACK.get(variant).HParams.model_fields
    except KeyError:  # an entry point that does not load is no user of the key
        return False
