"""Prefect flow ``claims``: the seed papers' claims checked on small offline experiments."""

from __future__ import annotations

from typing import Any

from prefect import flow

import fedcore.flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.core.config import config_dir, parse_overrides
from fedcore.flows.run_names import claims_run_name
from fedcore.report.claims import markdown
from fedcore.specs.claims import load_claims
from fedcore.tracking.claims import run_claims_tracked


@flow(name="claims", flow_run_name=claims_run_name, log_prints=True)
def claims(claims_file: str | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run CLAIMS_FILE (default configs/claims.yaml) as one MLflow parent run; print the table.

    Args:
        claims_file: the claims YAML ({name, base, seeds, set, claims}).
        overrides: KEY=VALUE strings: ``seeds=[0]`` or any experiment key, e.g. ``rounds=5``.
    """
    spec = load_claims(claims_file or config_dir() / "claims.yaml",
                       parse_overrides(overrides or []))
    run_id, rows, seconds = run_claims_tracked(spec, progress=print)
    print(markdown(rows))
    return {"run_id": run_id, "seconds": seconds,
            "holds": {r.id: r.holds for r in rows}, "verdicts": {r.id: r.verdict for r in rows},
            "table": markdown(rows)}
