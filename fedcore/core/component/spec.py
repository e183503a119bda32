"""One registry entry's spec, ``{key: NAME, **hparams}``, validated against the component's
``HParams`` with one-line errors (the stage, sampler and similar axes share it)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from fedcore.core.config.errors import ConfigError
from fedcore.core.config.limits import shown


def resolve_one(spec: dict[str, Any], where: str, registry: Any) -> dict[str, Any]:
    """``{key: name, **hparams}`` of one registry entry, defaults filled in."""
    key = registry.key
    name = spec.get(key)
    if not isinstance(name, str):
        got = "missing" if name is None else f"expected a name (got {shown(name)})"
        allowed = ", ".join(registry.names()) or "(none installed)"
        raise ConfigError(f"{where}.{key}: {got}; allowed: {allowed}")
    try:
        cls = registry.get(name)
        hp = registry.hparams(spec)
    except KeyError as exc:
        raise ConfigError(f"{where}.{key}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            allowed = ", ".join([key, *cls.HParams.model_fields])
            raise ConfigError(f"{where}.{field}: unknown key for {key} {name}; "
                              f"allowed: {allowed}") from None
        msg = err["msg"].removeprefix("Value error, ")
        got = f" (got {shown(err['input'])})" if "input" in err and not isinstance(
            err["input"], dict) else ""
        raise ConfigError(f"{where}.{field}: {msg}{got}") from None
    return {key: name, **hp.model_dump(mode="json")}
