"""Prefect flow ``sweep``: one task per grid cell under one parent MLflow run."""

from __future__ import annotations

import socket
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

from prefect import State, flow, task
from prefect.futures import as_completed
from pydantic import Field

import fedcore.flows  # noqa: F401  (offline environment before Prefect starts its server)
from fedcore.core.compose import plugins
from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, parse_overrides
from fedcore.core.data.federated import shared_federated_data
from fedcore.core.round import code_digest
from fedcore.core.round.simulation import resolve_device
from fedcore.core.runtime import stopping
from fedcore.flows.artifacts import publish_table
from fedcore.flows.console import quiet_console
from fedcore.flows.progress import Progress
from fedcore.flows.run_names import sweep_run_name
from fedcore.flows.runners import (
    GPU_TAG,
    check_runner,
    current_api_url,
    is_ephemeral,
    make_task_runner,
)
from fedcore.flows.server import owns_server
from fedcore.flows.stopping import hold_sigterm, relay_stop_to_dask, stopped_state, watch_dask_event
from fedcore.runtime_env.devices import pinned_device
from fedcore.runtime_env.env import pin_torch_threads
from fedcore.specs.sweep import Cell, SweepSpec, load_sweep
from fedcore.tracking import TrackingSettings, get_experiment_id, load_settings, mlflow_client
from fedcore.tracking.cell_claim import claim_cell
from fedcore.tracking.confirmation import check_screening_runs
from fedcore.tracking.names import cell_identities, parent_name
from fedcore.tracking.parents import log_source, sweep_summary
from fedcore.tracking.runner import finished_run, finishing, other_code_note, run_tracked
from fedcore.tracking.writers import wait_for_runs

if TYPE_CHECKING:
    from prefect import Task
    from prefect.client.schemas.objects import TaskRun
    from prefect.futures import PrefectFuture


def _retry_unless_diverged(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry a failed cell once, but not a divergence (it would diverge again)."""
    try:
        state.result()
    except FloatingPointError:
        return False
    except Exception:  # noqa: BLE001  (any other failure may be transient)
        return True
    return True


@task(
    name="simulate-cell",
    retries=1,
    retry_delay_seconds=1,
    retry_condition_fn=_retry_unless_diverged,
    tags=["fedcore-sim", GPU_TAG],
)
def simulate_cell(
    resolved: dict[str, Any],
    parent_run_id: str,
    sweep: str,
    settings: TrackingSettings | None = None,
    cells_per_gpu: int = 1,
    finish_in_background: bool = False,
    reuse_other_code: bool = False,
    stop_event: str | None = None,
    plugin_paths: list[str] | None = None,
    identity: dict[str, str] | None = None,
    code: str | None = None,
) -> dict[str, Any] | State[Any]:
    """Simulate one cell (its resolved config) as a child run of the sweep; ``identity``: its
    ``run_name`` and tags (``variant``, ``cell``, ``row`` and the row's regime;
    ``fedcore.tracking.names.cell_identities``).

    ``settings`` (the flow's MLflow store) travel with the task, so a Dask worker records into
    the same store; with GPUs the cell holds one device slot (``cuda:i``) while it runs. Cells
    of the same data share one loaded, partitioned dataset per process; with
    ``finish_in_background`` the run's end (figures, FINISHED) is written while the next cell
    trains (the flow waits for it before it ends). A FINISHED run of the same config made by
    the same code skips the cell (of any code with ``reuse_other_code``). On a Dask worker, the
    Dask event ``stop_event`` being set stops the cell at its next round boundary, as a signal
    does here. ``plugin_paths`` (``fedcore.core.compose.plugins.import_roots``) are put on the
    worker's ``sys.path`` where they exist, so it imports the user's components as the flow does.
    ``code``: the cell's code digest as the flow computed it before the first cell ran; a
    worker that loaded other code (a plugin edited since) fails the cell in one line.
    """
    with watch_dask_event(stop_event):
        if stopping.requested():  # queued when the stop came: not started
            return stopped_state("cell")
        plugins.add_roots(plugin_paths or [])
        return _simulate_cell(resolved, parent_run_id, sweep, settings, cells_per_gpu,
                              finish_in_background, reuse_other_code, identity or {}, code)


def _simulate_cell(
    resolved: dict[str, Any], parent_run_id: str, sweep: str, settings: TrackingSettings | None,
    cells_per_gpu: int, finish_in_background: bool, reuse_other_code: bool,
    identity: dict[str, str], code: str | None = None,
) -> dict[str, Any] | State[Any]:
    try:
        cfg = build_config(resolved)
    except ConfigError as exc:  # e.g. a worker of another machine lacks the user's package
        raise ConfigError(f"{exc} (on {where()})") from None
    here = code_digest.of_config(cfg)
    if code is not None and here != code:
        raise ConfigError(f"cell {cfg.config_hash()}: {where()} loaded other code (digest "
                          f"{here}) than the sweep digested at its start ({code}): a plugin "
                          "file changed meanwhile; run the sweep again")
    settings = settings or load_settings()
    try:  # one process at a time runs a config; the others then find it FINISHED
        claim = claim_cell(cfg.config_hash(), settings.tracking_uri, on_wait=lambda: print(
            f"cell {cfg.config_hash()}: another sweep runs this config; waiting for it"))
    except stopping.StopRequested:
        return stopped_state("cell")
    run_id: str | None = None
    try:
        done = finished_run(cfg.config_hash(), settings, any_code=reuse_other_code, code=here)
        if done is not None:
            return {"run_id": done.info.run_id, "status": "skipped", **done.data.metrics}
        with pinned_device(cfg.device, cells_per_gpu) as device:
            pin_torch_threads()  # before the shared data is built (its reductions too)
            data = shared_federated_data(cfg.dataset, cfg.seed,
                                         resolve_device(device or cfg.device), cfg.clients)
            run_id, result = run_tracked(
                cfg, parent_run_id=parent_run_id, settings=settings, device=device, data=data,
                tags={"sweep": sweep, **{k: v for k, v in identity.items() if k != "run_name"}},
                run_name=identity.get("run_name"), wait=not finish_in_background, figures=False,
            )
    except stopping.StopRequested:  # its run is KILLED with the rounds it finished
        return stopped_state("cell")
    finally:  # held until the run's end (FINISHED) is written, in the background or here
        ending = finishing(run_id) if run_id is not None else None
        if ending is None:
            claim.release()
        else:
            ending.add_done_callback(lambda _: claim.release())
    return {"run_id": run_id, "status": "finished", **result.summary}


def _row(cell: Cell, future: PrefectFuture[Any]) -> dict[str, Any]:
    """A finished cell's row: its label, status and summary metrics (or its error)."""
    future.wait()
    state = future.state
    if state.is_completed():
        return {"cell": cell.label, **future.result()}
    if state.is_cancelled() and stopping.requested():
        return {"cell": cell.label, "status": "stopped"}
    return {"cell": cell.label, "status": "failed", "error": str(state.message or state.name)}


def task_run_name(identity: dict[str, str]) -> str:
    """The cell's run name as Prefect's ``task_run_name``, which Prefect formats with the
    task's parameters: braces are doubled so that they are printed, not looked up."""
    return identity["run_name"].replace("{", "{{").replace("}", "}}")


def where() -> str:
    """This process as a cell's error names it: its Dask worker's address, else its host."""
    try:
        from distributed import get_worker

        return f"Dask worker {get_worker().address}"
    except (ImportError, ValueError):
        return f"host {socket.gethostname()}"


def parent_run(spec: SweepSpec, settings: TrackingSettings | None = None) -> str:
    """Get or create the sweep's parent run (one per sweep name and grid)."""
    settings = settings or load_settings()
    client = mlflow_client(settings)
    exp_id = get_experiment_id(client, settings)
    found = client.search_runs(
        [exp_id], filter_string=f"tags.sweep_hash = '{spec.sweep_hash}'", max_results=1
    )
    if found:
        run_id: str = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        return run_id
    run_id = client.create_run(
        exp_id,
        run_name=parent_name("sweep", spec.name),
        tags={"sweep": spec.name, "sweep_hash": spec.sweep_hash, "fedcore.role": "sweep"},
    ).info.run_id
    return run_id


@flow(name="sweep", flow_run_name=sweep_run_name, log_prints=True)
def sweep(
    sweep_file: Annotated[str, Field(description="the sweep YAML ({name, base, grid, set})")],
    overrides: Annotated[
        list[str] | None, Field(description="KEY=VALUE strings applied to every cell")
    ] = None,
    max_workers: Annotated[int, Field(ge=1, description="cells run at once")] = 1,
    runner: Annotated[
        Literal["thread", "dask"], Field(description="task runner: thread or dask")
    ] = "thread",
    dask_address: Annotated[
        str | None, Field(description="scheduler of an existing Dask cluster (runner=dask)")
    ] = None,
    cells_per_gpu: Annotated[int, Field(ge=1, description="cells sharing one GPU")] = 1,
    reuse_other_code: Annotated[bool, Field(
        description="skip cells with a FINISHED run made by other code too (default: only by "
        "this code; docs/explanation/provenance.md)")] = False,
) -> list[dict[str, Any]] | State[Any]:
    """Run every cell of SWEEP_FILE; cells with a FINISHED run of the same config made by the
    same code (code digest) are skipped.

    SIGTERM or SIGINT stops it: no new cell starts, the cells in flight end after their current
    round (runs KILLED), and the flow run ends Cancelled; running it again resumes.

    Each cell holds its own GPU seat while it runs (``cells_per_gpu`` cells per GPU; device
    locks, ``fedcore.runtime_env.devices``). Cells carry the ``gpu`` tag, so that a Prefect
    server's ``gpu`` tag limit caps them across flows; the flow sets no such limit itself.

    Args:
        sweep_file: the sweep YAML ({name, base, grid, set}).
        overrides: KEY=VALUE strings applied to every cell (dotted keys, YAML values).
        max_workers: cells run at once (threads, or LocalCluster worker processes).
        runner: ``thread`` (threads in the flow's process) or ``dask``.
        dask_address: scheduler address of an existing Dask cluster (runner=dask); None starts
            a LocalCluster of ``max_workers`` single-threaded processes.
        cells_per_gpu: cells allowed to share one GPU.
        reuse_other_code: also skip cells whose FINISHED run was made by other code.
    """
    hold_sigterm()
    quiet_console()
    check_runner(runner, max_workers, dask_address, cells_per_gpu)
    spec = load_sweep(sweep_file, parse_overrides(overrides or []))
    settings = load_settings()
    check_screening_runs(spec, settings)  # a confirmation on seeds its screening ran
    parent = parent_run(spec, settings)
    client = mlflow_client(settings)
    log_source(client, parent, sweep_file, list(overrides or []), "sweep.yaml")
    for note in (spec.duplicates_note(),
                 other_code_note((c.config for c in spec.cells), settings,
                                 reused=reuse_other_code)):
        if note:
            print(note)
    api_url = None
    if is_ephemeral() or owns_server():
        api_url = current_api_url()
        if dask_address:
            print(
                f"warning: no Prefect server configured; the workers of {dask_address} cannot "
                "reach this temporary one and start their own (set PREFECT_API_URL)"
            )
    stop_event = f"fedcore-stop-{uuid.uuid4().hex}" if runner == "dask" else None
    try:
        rows = _run_looks(spec, parent, settings, max_workers, runner, dask_address, api_url,
                          cells_per_gpu, reuse_other_code, stop_event)
    except BaseException:  # e.g. the Dask cluster went away: the parent is not left RUNNING
        client.set_terminated(parent, "KILLED" if stopping.requested() else "FAILED")
        raise
    wait_for_runs()
    if stopping.requested():
        client.set_terminated(parent, "KILLED")
        return stopped_state(f"sweep {spec.name}")
    failed = sum(r["status"] == "failed" for r in rows)
    table = sweep_summary(client, parent, spec.name, rows,
                          planned=sum(spec.planned(c) for c in spec.cells))
    publish_table(f"sweep-{spec.name}", table, settings, parent, rows, label="run_name")
    client.set_terminated(parent, "FAILED" if failed else "FINISHED")
    return rows


def _run_looks(
    spec: SweepSpec, parent: str, settings: TrackingSettings, max_workers: int, runner: str,
    dask_address: str | None, api_url: str | None, cells_per_gpu: int, reuse_other_code: bool,
    stop_event: str | None,
) -> list[dict[str, Any]]:
    """Run the seed plan's looks in turn (``fedcore.stats.looks``): each look's new
    seeds for the rows that still need them, then the families are decided from the runs in
    MLflow, and rows whose comparisons are all decided stop. Finished cells are read back,
    never rerun, so a killed sweep resumes where it stopped."""
    plan = spec.seed_plan
    rows: list[dict[str, Any]] = []
    # every cell's code digest before any cell runs: a file edited during the sweep is not
    # recorded as the code of a cell that ran the old one
    codes = {c.config.config_hash(): code_digest.of_config(c.config) for c in spec.cells}
    needed: set[str] | None = None
    # one task runner (one Dask cluster, its workers' imports and data caches) for every look
    with (make_task_runner(runner, max_workers, dask_address, api_url) as task_runner,
          relay_stop_to_dask(task_runner, stop_event)):
        for look in range(len(plan.looks)):
            cells = spec.cells_for_look(look, needed)
            if len(plan.looks) > 1:
                print(f"look {look + 1} of {len(plan.looks)} ({plan.looks[look]} seeds): "
                      f"{len(cells)} cells")
            rows += _run_cells(spec, cells, codes, parent, settings, task_runner, runner,
                               cells_per_gpu, reuse_other_code, stop_event)
            if stopping.requested() or look + 1 == len(plan.looks):
                break
            if spec.families:
                wait_for_runs()  # every run of this look FINISHED before the families are read
                needed = open_rows(spec, settings, reuse_other_code)
                if not needed:
                    print("every comparison is decided: no further look")
                    break
    return rows


def open_rows(spec: SweepSpec, settings: TrackingSettings, reuse_other_code: bool) -> set[str]:
    """The rows the next look needs: the open comparisons' rows and their references."""
    from fedcore.stats.looks import family_outcomes, rows_to_run
    from fedcore.tracking.sweep_runs import sweep_runs

    runs = sweep_runs(spec, settings, any_code=reuse_other_code)
    if runs.empty:
        return {r for f in spec.families for r in f.rows}
    return rows_to_run(family_outcomes(runs, spec.families, spec.seed_plan))


def _run_cells(
    spec: SweepSpec, cells: list[Cell], codes: dict[str, str], parent: str,
    settings: TrackingSettings, task_runner: Any, runner: str,
    cells_per_gpu: int, reuse_other_code: bool, stop_event: str | None,
) -> list[dict[str, Any]]:
    """Submit ``cells`` to ``task_runner`` and collect one row per cell, in grid order."""
    rows: list[dict[str, Any]] = []
    if not cells:
        return rows
    every = dict(zip((c.config.config_hash() for c in spec.cells),
                     cell_identities(spec.cells, spec.families),
                     strict=True))  # names from the whole sweep: the same in every look
    identities = [every[c.config.config_hash()] for c in cells]
    futures = [
        (
            cell,
            task_runner.submit(
                simulate_cell.with_options(task_run_name=task_run_name(identity)),
                {
                    "resolved": cell.config.resolved(),
                    "parent_run_id": parent,
                    "sweep": spec.name,
                    "settings": settings,
                    "cells_per_gpu": cells_per_gpu,
                    "finish_in_background": runner == "thread",
                    "reuse_other_code": reuse_other_code,
                    "stop_event": stop_event,
                    "plugin_paths": plugins.import_roots(cell.config.resolved()["method"]),
                    "identity": identity,
                    "code": codes[cell.config.config_hash()],
                },
            ),
        )
        for cell, identity in zip(cells, identities, strict=True)
    ]
    index: dict[PrefectFuture[Any], int] = {f: i for i, (_, f) in enumerate(futures)}
    progress = Progress(len(futures))
    done: dict[int, dict[str, Any]] = {}
    for future in as_completed([f for _, f in futures]):
        i = index[future]
        done[i] = {**_row(cells[i], future), "run_name": identities[i]["run_name"]}
        error = f": {done[i]['error']}" if "error" in done[i] else ""
        print(progress.line(done[i]["status"], identities[i]["run_name"] + error))
    rows = [done[i] for i in range(len(futures))]
    return rows
