"""A simulation's results as pandas DataFrames: one row per round, one per (round, client).

pandas is imported where a frame is made (the core runs without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from fedcore.core.records.client_table import ClientTable


def rounds_frame(history: list[dict[str, float]]) -> pd.DataFrame:
    """One row per round (``round`` first), one column per metric; NaN where a round lacks one
    (metrics of evaluated rounds only, with ``eval_every`` > 1)."""
    import pandas as pd

    frame = pd.DataFrame(history)
    if "round" in frame.columns:
        frame["round"] = frame["round"].astype(int)
    return frame


def clients_frame(tables: list[ClientTable]) -> pd.DataFrame:
    """One row per (evaluated round, client): the global model's accuracy and loss on the
    client's local test split, its sample count, whether it was sampled, and the per-client
    columns of the rule and objective (NaN where not reported)."""
    import pandas as pd

    columns = {
        "round": np.concatenate([np.full(len(t.client_id), t.round) for t in tables]),
        "client_id": np.concatenate([t.client_id for t in tables]),
        "accuracy": np.concatenate([t.accuracy for t in tables]),
        "loss": np.concatenate([t.loss for t in tables]),
        "num_samples": np.concatenate([t.num_samples for t in tables]),
        "sampled": np.concatenate([t.sampled for t in tables]),
    }
    for name in sorted({k for t in tables for k in t.extra}):
        columns[name] = np.concatenate(
            [t.extra.get(name, np.full(len(t.client_id), np.nan)) for t in tables]
        )
    return pd.DataFrame(columns)
