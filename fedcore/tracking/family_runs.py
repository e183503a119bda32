"""Each family's runs in MLflow: a search string and a UI link that select exactly them.

The report names, per family and setting, the runs its table was computed from, so that the
MLflow UI (or ``mlflow.search_runs``) shows the same runs the report does. The search string is
the shortest that selects exactly those runs, checked against the store: by the tags a sweep
cell carries (``sweep``, ``dataset``, ``alpha`` and ``family.<name>``, since MLflow's search
has no OR over rows), narrowed by status and code digest where older runs of the same rows
would also match, else by run id (runs recorded before cells carried family tags, or runs
another sweep made).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from fedcore.tracking.links import TRAINING_VIEW, ui_base
from fedcore.tracking.names import FAMILY_TAG
from fedcore.tracking.provenance import CODE_DIGEST_TAG
from fedcore.tracking.run_store import MlflowRunStore

if TYPE_CHECKING:
    import pandas as pd

    from fedcore.stats.looks import FamilyOutcome
    from fedcore.tracking.settings import TrackingSettings

UI_PAGE = 100  # runs the MLflow UI's run table loads at a time ("Load more" for the next)


def _quoted(values: list[str]) -> str:
    return ", ".join("'" + v.replace("'", "\\'") + "'" for v in values)


def candidates(runs: pd.DataFrame, sweep: str, family: str) -> list[str]:
    """Search strings for ``runs`` (the report's runs of family ``family`` at one setting:
    ``run_id``, ``dataset``, ``alpha``, ``status``, ``code_digest``), shortest first; the last
    one lists the run ids and always selects exactly them."""
    (dataset,), (alpha,) = set(runs["dataset"]), set(runs["alpha"])
    by_tags = (f"tags.sweep = '{sweep}' and tags.`{FAMILY_TAG}{family}` = 'yes' and "
               f"tags.dataset = '{dataset}' and tags.alpha = '{alpha}'")
    out = [by_tags]
    statuses = sorted(set(runs["status"]))
    if len(statuses) == 1:
        by_tags += f" and attributes.status = '{statuses[0]}'"
        out.append(by_tags)
    codes = {str(c) for c in runs["code_digest"]}
    if len(codes) == 1 and "" not in codes:
        out.append(by_tags + f" and tags.`{CODE_DIGEST_TAG}` = '{codes.pop()}'")
    out.append(f"attributes.run_id IN ({_quoted(list(runs['run_id']))})")
    return out


def exact_search(runs: pd.DataFrame, sweep: str, family: str, store: MlflowRunStore) -> str:
    """The first of ``candidates`` whose search in ``store`` returns exactly ``runs``."""
    wanted = set(runs["run_id"])
    options = candidates(runs, sweep, family)
    for query in options[:-1]:
        if {r.info.run_id for r in store.matching(query)} == wanted:
            return query
    return options[-1]


def search_url(settings: TrackingSettings, experiment_id: str, query: str) -> str:
    """The MLflow UI's address of the experiment's run table filtered by ``query`` (MLflow
    3.17 applies ``searchFilter`` on the ``/runs`` page; the experiment's bare address shows
    every run)."""
    return (f"{ui_base(settings)}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}"
            f"&searchFilter={quote(query, safe='')}")  # the runs page reads searchFilter


def family_runs(outcome: FamilyOutcome, runs: pd.DataFrame) -> pd.DataFrame:
    """The report's runs of ``outcome``'s family at its setting (every status)."""
    dataset, alpha = outcome.setting
    return runs[runs["row"].isin(outcome.family.rows) & (runs["dataset"] == dataset)
                & (runs["alpha"] == alpha)]


def mlflow_section(outcomes: list[FamilyOutcome], runs: pd.DataFrame, sweep: str,
                   settings: TrackingSettings) -> str:
    """The report's "Runs in MLflow" section: per family and setting, its runs' count, the
    search string that selects exactly them and a link that opens them in the MLflow UI
    ("" without families)."""
    if not outcomes or runs.empty:
        return ""
    store = MlflowRunStore(settings)
    experiment = store.experiment_id()
    lines = []
    for o in outcomes:
        mine = family_runs(o, runs)
        if mine.empty:
            continue
        query = exact_search(mine, sweep, o.family.name, store)
        paging = (f"; the UI loads {UI_PAGE} runs at a time: press *Load more* until all "
                  f"{len(mine)} show before you compare them" if len(mine) > UI_PAGE else "")
        lines.append(f"- **{o.family.paper}** ({o.setting[0]}, Dirichlet {o.setting[1]:g}; "
                     f"{len(mine)} runs{paging}): [open in MLflow]"
                     f"({search_url(settings, experiment, query)}), search `` {query} ``")
    if not lines:
        return ""
    return ("## Runs in MLflow\n\nEach family's runs, exactly those its table was computed "
            "from: paste the search string into the MLflow UI's search box (or "
            "`mlflow.search_runs(filter_string=...)`), or follow the link (it needs "
            "`fedcore ui` running).\n\n" + "\n".join(lines) + "\n\n")
