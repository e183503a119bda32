"""The final models of a run as MLflow artifacts, and ``load_model(run_id)`` to get them back.

``model/global.pt`` holds the global model's ``state_dict`` with what is needed to rebuild it
(model name or import path and its kwargs, norm, input shape, classes, MOON's projection head;
whether it was an instance passed from Python, which is loaded into a module given to
``load_model``); for personalised methods
(Ditto) ``model/personal.pt`` holds every client's personal parameters. Both are plain
``torch.save`` files of tensors and numbers, read with ``weights_only=True``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from fedcore.layout import load_flat_params
from fedcore.models.external import build

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from fedcore.models import FedModel
    from fedcore.simulation import Simulation

GLOBAL_ARTIFACT = "model/global.pt"
PERSONAL_ARTIFACT = "model/personal.pt"


def model_spec(sim: Simulation) -> dict[str, Any]:
    cfg = sim.cfg
    return {
        "model": cfg.model.name,
        "kwargs": dict(cfg.model.kwargs),
        "instance": cfg.model.weights is not None,  # passed from Python as an instance
        "norm": cfg.model.norm,
        "in_shape": [int(v) for v in sim.data.in_shape],
        "num_classes": int(sim.data.num_classes),
        "projection_dim": sim.client_algo.projection_dim,
        "round": int(sim.round),
    }


def global_state(sim: Simulation) -> dict[str, torch.Tensor]:
    """The final global model's ``state_dict`` (parameters and buffers, on the CPU)."""
    load_flat_params(sim.model, sim.params)
    if sim.buffers:
        sim.model.load_state_dict(sim.buffers, strict=False)
    return {k: v.detach().cpu().clone() for k, v in sim.model.state_dict().items()}


def personal_states(sim: Simulation) -> dict[int, dict[str, Any]]:
    """Each client's personal parameters (flat) and buffers; empty for global-only methods."""
    if not sim.client_algo.personalized:
        return {}
    out = {}
    for c in sim.data.clients:
        own = sim.client_algo.personal_params(sim.store[c.client_id])
        if own is not None:
            params, buffers = own
            out[int(c.client_id)] = {
                "params": params.detach().cpu().clone(),
                "buffers": {k: v.detach().cpu().clone() for k, v in (buffers or {}).items()},
            }
    return out


def log_models(client: MlflowClient, run_id: str, sim: Simulation) -> list[str]:
    """Upload the final global model (and personal models) to the run; returns their paths."""
    spec = model_spec(sim)
    logged = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        folder.mkdir()
        torch.save({**spec, "state_dict": global_state(sim)}, folder / "global.pt")
        logged.append(GLOBAL_ARTIFACT)
        personal = personal_states(sim)
        if personal:
            torch.save({**spec, "clients": personal}, folder / "personal.pt")
            logged.append(PERSONAL_ARTIFACT)
        client.log_artifacts(run_id, str(folder), "model")
    return logged


def _build(spec: dict[str, Any], run_id: str, given: torch.nn.Module | None) -> torch.nn.Module:
    if given is not None:
        model = given
    elif spec.get("instance"):
        raise LookupError(
            f"run {run_id}: its model ({spec['model']}) was passed from Python as an instance; "
            "give one of the same architecture: load_model(run_id, model=...)"
        )
    else:
        model = build(spec["model"], spec.get("kwargs", {}), spec["norm"],
                      tuple(spec["in_shape"]), spec["num_classes"])
    if spec.get("projection_dim") is not None and not hasattr(model, "projection"):
        cast("FedModel", model).add_projection_head(spec["projection_dim"])
    return model


def load_model(
    run_id: str,
    client_id: int | None = None,
    tracking_uri: str | None = None,
    model: torch.nn.Module | None = None,
) -> torch.nn.Module:
    """The final global model of an MLflow run (``client_id``: that client's personal model),
    on the CPU in eval mode. ``tracking_uri`` defaults to mlflow.yml / MLFLOW_TRACKING_URI.

    A built-in model or one given by import path is rebuilt from the run's record; ``model``
    (a module of the same architecture) receives the weights instead, as it must for a model
    passed from Python as an instance.
    """
    from fedcore.tracking.mlflow_tracker import mlflow_client
    from fedcore.tracking.settings import load_settings

    settings = load_settings()
    if tracking_uri is not None:
        from dataclasses import replace

        settings = replace(settings, tracking_uri=tracking_uri)
    client = mlflow_client(settings)
    artifact = GLOBAL_ARTIFACT if client_id is None else PERSONAL_ARTIFACT
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = client.download_artifacts(run_id, artifact, tmp)
        except Exception as exc:  # noqa: BLE001
            raise LookupError(f"run {run_id}: no {artifact} ({exc})") from None
        saved = torch.load(local, map_location="cpu", weights_only=True)
    model = _build(saved, run_id, model)
    if client_id is None:
        model.load_state_dict(saved["state_dict"])
    else:
        if client_id not in saved["clients"]:
            raise LookupError(f"run {run_id}: client {client_id} has no personal model "
                              f"(clients with one: {sorted(saved['clients'])})")
        own = saved["clients"][client_id]
        load_flat_params(model, own["params"])
        if own["buffers"]:
            model.load_state_dict(own["buffers"], strict=False)
    return model.eval()
