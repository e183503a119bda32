"""A confirmation sweep checked against its screening sweep's recorded runs: the seeds and
configs the screening actually ran (their ``seed`` and ``config_hash`` tags in the store), not
what its file lists now. An edited screening file let a confirmation on the screening's own
seeds pass, and then skip every cell as already FINISHED."""

from __future__ import annotations

from fedcore.core.config import ConfigError
from fedcore.specs.sweep import SweepSpec
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.settings import TrackingSettings, load_settings


def check_screening_runs(spec: SweepSpec, settings: TrackingSettings | None = None) -> None:
    """Refuse ``spec`` in one line when it confirms a screening sweep (``confirms:``) one of
    whose recorded runs has a seed or a config hash of one of its cells, or when a cell's very
    config was run before by anything but this sweep (a screening renamed since)."""
    if spec.screening is None:
        return
    store = MlflowRunStore(settings or load_settings())
    runs = store.runs_of_sweep(spec.screening)
    seeds = {r.data.tags.get("seed"): r for r in runs if r.data.tags.get("seed") is not None}
    hashes = {r.data.tags.get("config_hash"): r for r in runs}
    for cell in spec.cells:
        cfg = cell.config
        run = hashes.get(cfg.config_hash()) or seeds.get(str(cfg.seed))
        if run is None:  # the screening renamed since: any earlier run of this very config
            run = next((r for r in store.runs_of_config(cfg.config_hash())
                        if r.data.tags.get("sweep") != spec.name), None)
        if run is not None:
            by = run.data.tags.get("sweep")
            raise ConfigError(
                f"sweep.confirms: seed {cfg.seed} (cell [{cell.label}]) was run by "
                f"{'the sweep ' + repr(by) if by else 'an earlier run'} (run "
                f"{run.info.run_id} in the store, whatever the screening's file lists now); a "
                "confirmation needs seeds the screening never ran, e.g. seeds: {looks: [...], "
                "start: 100}")
