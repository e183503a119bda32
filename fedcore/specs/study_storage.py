"""Where a study's trials are stored: an SQLAlchemy URL checked, a relative SQLite path made the
project's, and a password never shown."""

from __future__ import annotations

from fedcore.core.config import ConfigError, project_root

DEFAULT_STORAGE_FILE = "optuna.db"
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")  # with an optional driver: mysql+pymysql


def mask_password(url: str) -> str:
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url



def default_storage() -> str:
    return f"sqlite:///{project_root() / DEFAULT_STORAGE_FILE}"


def resolve_storage(url: str | None) -> str:
    """None -> the project's SQLite file; a relative SQLite path is relative to the project."""
    if not url:
        return default_storage()
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"study.storage: expected an SQLAlchemy URL such as sqlite:///optuna.db or "
            f"postgresql://user:pw@host/db (got {url!r})"
        )
    scheme = url.split("://", 1)[0].split("+", 1)[0]
    if scheme not in STORAGE_SCHEMES:
        raise ConfigError(
            f"study.storage: unknown scheme {scheme[:40]!r} in {mask_password(url)[:200]!r}; "
            f"allowed: {', '.join(STORAGE_SCHEMES)} (e.g. sqlite:///optuna.db)"
        )
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + str((project_root() / url.removeprefix("sqlite:///")).resolve())
    return url
