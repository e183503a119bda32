"""What the commands share: the overrides' epilog, splitting a config from its overrides,
printing a table and the store's schema helper."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedcore.core.config import ConfigError

if TYPE_CHECKING:
    from fedcore.tracking.store_setup import StoreHelper

EPILOG = "Overrides are KEY=VALUE with dotted keys, e.g. dataset.alpha=0.1 rounds=50."


def split_args(items: list[str]) -> tuple[str | None, list[str]]:
    """The config file (the first item without ``=``, None: none) and the overrides."""
    config = None
    rest = []
    for item in items:
        if "=" not in item and config is None:
            config = item
        else:
            rest.append(item)
    return config, rest


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Print ``rows`` as a table of ``columns``, floats to four decimals."""

    def fmt(v: Any) -> str:
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def store_helper() -> StoreHelper | None:
    """The helper process that creates a new SQLite store's schema (None: an existing store,
    or settings that the run itself will report as wrong)."""
    from fedcore.tracking.settings import load_settings
    from fedcore.tracking.store_setup import start_helper

    try:
        return start_helper(load_settings().tracking_uri)
    except ConfigError:
        return None
