"""The final models of a run as an MLflow Model, and ``load_model(run_id)`` to get them back.

The final global model is the run's MLflow Model ``model`` (``mlflow.pytorch``, pickle format:
the fedcore model class itself), with a signature and an input example from the test data and
explicit pip requirements: ``mlflow.pytorch.load_model("runs:/<run_id>/model")``, the UI's
Models column and the model registry take it. For personalised methods (Ditto) every client's
personal parameters ride inside it as ``extra_files/personal.pt`` (a plain ``torch.save`` file of
tensors, read with ``weights_only=True``), so one model serves all clients. Runs recorded before
kept ``model/global.pt`` (a ``state_dict`` with what rebuilds it) and ``model/personal.pt`` as
plain artifacts; `load_model` reads both layouts. The model's ``extra_files/global.pt``
also keeps its ``state_dict`` with what rebuilds it (model name or import path and kwargs, norm,
input shape, classes, MOON's projection head).

``load_model`` never unpickles: it reads ``extra_files/global.pt`` with
``torch.load(weights_only=True)`` (tensors, numbers, strings, no code) and rebuilds the model
from that record, a built-in name or an import path held to the kinds of
``fedcore.core.models.external.check_model_kind``, or loads the weights into the module given as
``model=``. What it trusts is the code the record names (fedcore's, or a model package you
installed), not the store's files. ``mlflow.pytorch.load_model`` on the same run does unpickle
``data/model.pth``: use it only on a store whose writers you trust.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import logging
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from fedcore.core.models.external import build
from fedcore.core.models.layout import load_flat_params

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from fedcore.core.models import FedModel
    from fedcore.core.records.run import RunView

MODEL_NAME = "model"  # runs:/<run_id>/model
PERSONAL_FILE = "personal.pt"  # in the MLflow Model's extra_files/
GLOBAL_FILE = "global.pt"  # in extra_files/: the state_dict with what rebuilds the model
EXAMPLE_ROWS = 5  # test samples saved as the model's input example
GLOBAL_ARTIFACT = "model/global.pt"  # runs recorded before the MLflow Model
PERSONAL_ARTIFACT = "model/personal.pt"


def model_spec(sim: RunView) -> dict[str, Any]:
    cfg = sim.cfg
    return {
        "model": cfg.model.name,
        "kwargs": dict(cfg.model.kwargs),
        "instance": cfg.model.weights is not None,  # passed from Python as an instance
        "norm": cfg.model.norm,
        "in_shape": [int(v) for v in sim.data.in_shape],
        "num_classes": int(sim.data.num_classes),
        "projection_dim": sim.projection_dim,
        "round": int(sim.round),
    }


def personal_states(sim: RunView) -> dict[int, dict[str, Any]]:
    """Each client's personal parameters (flat) and buffers; empty for global-only methods."""
    if not sim.personalized:
        return {}
    out = {}
    for c in sim.data.clients:
        own = sim.personal_params(c.client_id)
        if own is not None:
            params, buffers = own
            out[int(c.client_id)] = {
                "params": params.detach().cpu().clone(),
                "buffers": {k: v.detach().cpu().clone() for k, v in (buffers or {}).items()},
            }
    return out


def global_model(sim: RunView) -> torch.nn.Module:
    """A CPU copy of the final global model (parameters and buffers) in eval mode."""
    load_flat_params(sim.model, sim.params)
    if sim.buffers:
        sim.model.load_state_dict(dict(sim.buffers), strict=False)
    return copy.deepcopy(sim.model).to("cpu").eval()


def requirements() -> list[str]:
    """The model's pip requirements, pinned to this environment (given explicitly: MLflow's
    inference of them imports and scans the environment, seconds per run)."""
    return list(_pins())


@functools.cache
def _pins() -> tuple[str, ...]:
    """The pins of `requirements`, read once per process (each lookup scans site-packages)."""
    from fedcore import __version__

    pins = []
    for name in ("torch", "cloudpickle"):  # cloudpickle: MLflow pickles the model with it
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:  # torch built from source, say
            pins.append(name)
    return (*pins, f"fedcore=={__version__}")


_SAVE_LOCK = threading.Lock()


class _DropPickleCaution(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Pickle or CloudPickle" not in record.getMessage()


@contextmanager
def _quiet_save() -> Iterator[None]:
    """While one model is saved: skip MLflow's check that the requirements match this
    environment (they were read from it; the check indexes every installed file, 1.5-3 s of CPU
    once per process) and drop its warning about the pickle format (fedcore chose it: the loaded
    model is the fedcore model class, which a traced ``pt2`` graph is not)."""
    import mlflow.utils.environment as environment

    check = "warn_dependency_requirement_mismatches"
    caution = _DropPickleCaution()
    with _SAVE_LOCK:
        original = getattr(environment, check, None)
        if original is not None:
            setattr(environment, check, lambda requirements: None)
        logging.getLogger("mlflow.pytorch").addFilter(caution)
        try:
            yield
        finally:
            logging.getLogger("mlflow.pytorch").removeFilter(caution)
            if original is not None:
                setattr(environment, check, original)


@dataclass(frozen=True)
class ModelPackage:
    """What the run's MLflow Model is made of, taken from the simulation at its end: a CPU copy
    of the global model, an input example, what rebuilds the model and the personal models."""

    model: torch.nn.Module
    example: np.ndarray
    spec: dict[str, Any]
    personal: dict[int, dict[str, Any]]
    round: int


def model_package(sim: RunView) -> ModelPackage:
    """The final models of ``sim`` (copied: the package outlives later changes to ``sim``)."""
    return ModelPackage(
        model=global_model(sim),
        example=np.ascontiguousarray(sim.data.x_test[:EXAMPLE_ROWS].detach().cpu().numpy()),
        spec=model_spec(sim), personal=personal_states(sim), round=int(sim.round),
    )


def log_models(client: MlflowClient, run_id: str, sim: RunView) -> list[str]:
    """Log the final global model (with the personal models, if any) as the run's MLflow
    Model ``model``; returns its ``models:/`` URI."""
    return log_model_package(client, run_id, model_package(sim))


def log_model_package(client: MlflowClient, run_id: str, package: ModelPackage) -> list[str]:
    """Log ``package`` as the run's MLflow Model ``model``; returns its ``models:/`` URI."""
    import mlflow.pytorch
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus
    from mlflow.models import Model, infer_signature

    model, example = package.model, package.example
    with torch.no_grad():
        output = model(torch.from_numpy(example))
    signature = infer_signature(example, output.numpy() if torch.is_tensor(output) else None)
    experiment_id = client.get_run(run_id).info.experiment_id
    logged = client.create_logged_model(experiment_id, name=MODEL_NAME, source_run_id=run_id)
    with tempfile.TemporaryDirectory() as tmp:
        extra = [str(Path(tmp) / GLOBAL_FILE)]
        torch.save({**package.spec, "state_dict": model.state_dict()}, extra[0])
        if package.personal:
            extra.append(str(Path(tmp) / PERSONAL_FILE))
            torch.save({**package.spec, "clients": package.personal}, extra[-1])
        meta = Model(artifact_path=logged.artifact_location, model_uuid=logged.model_id,
                     run_id=run_id, model_id=logged.model_id)
        folder = Path(tmp) / MODEL_NAME
        with _quiet_save():
            mlflow.pytorch.save_model(
                model, str(folder), mlflow_model=meta, signature=signature,
                input_example=example, pip_requirements=requirements(), extra_files=extra,
                serialization_format="pickle",
            )
        client.log_model_artifacts(logged.model_id, str(folder))
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=package.round)])
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    return [f"models:/{logged.model_id}"]


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
    """The final global model of an MLflow run, on the CPU in eval mode.

    A built-in model or one given by import path is rebuilt from the run's record; ``model``
    receives the weights instead, as it must for a model passed from Python as an instance.
    Nothing is unpickled: the weights are read with ``torch.load(weights_only=True)`` (module
    docstring).

    Args:
        run_id: the MLflow run.
        client_id: that client's personal model (personalised methods) instead of the global.
        tracking_uri: the MLflow store (default: mlflow.yml / MLFLOW_TRACKING_URI).
        model: a module of the same architecture to load the weights into.

    Returns:
        The model with the run's final weights.

    Raises:
        LookupError: no such run, or it logged no model.
    """
    from fedcore.tracking.client import mlflow_client
    from fedcore.tracking.settings import load_settings

    settings = load_settings()
    if tracking_uri is not None:
        from dataclasses import replace

        settings = replace(settings, tracking_uri=tracking_uri)
    client = mlflow_client(settings)
    try:
        run = client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001
        raise LookupError(f"run {run_id}: not found ({exc})") from None
    ids = [o.model_id for o in (run.outputs.model_outputs if run.outputs else [])]
    logged = [m for m in map(client.get_logged_model, ids) if m.name == MODEL_NAME]
    if not logged:
        return _load_legacy(client, run_id, client_id, model)
    import mlflow.artifacts

    with tempfile.TemporaryDirectory() as tmp:
        local = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=logged[-1].artifact_location, dst_path=tmp,
            tracking_uri=settings.tracking_uri,
        ))
        extra = local / "extra_files"
        saved = _weights_only(extra / GLOBAL_FILE, run_id)
        net = _build(saved, run_id, model)
        net.load_state_dict(saved["state_dict"])
        if client_id is not None:
            path = extra / PERSONAL_FILE
            saved = torch.load(path, map_location="cpu", weights_only=True) if path.is_file() \
                else {"clients": {}}
            _personal(net, saved, run_id, client_id)
    return net.eval()


def _weights_only(path: Path, run_id: str) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of a model record, one-line ``LookupError`` if it is
    missing or holds anything but plain data and tensors."""
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise LookupError(f"run {run_id}: its MLflow Model has no extra_files/{path.name}") \
            from None
    except Exception as exc:  # noqa: BLE001  (an unpickling refused by weights_only, say)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise LookupError(f"run {run_id}: extra_files/{path.name} is not a plain weights file "
                          f"({type(exc).__name__}: {first[:200]})") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("state_dict"), dict):
        raise LookupError(f"run {run_id}: extra_files/{path.name} holds no state_dict")
    return saved


def _personal(model: torch.nn.Module, saved: dict[str, Any], run_id: str, client_id: int) -> None:
    """Load client ``client_id``'s personal parameters and buffers into ``model``."""
    if client_id not in saved["clients"]:
        raise LookupError(f"run {run_id}: client {client_id} has no personal model "
                          f"(clients with one: {sorted(saved['clients'])})")
    own = saved["clients"][client_id]
    load_flat_params(model, own["params"])
    if own["buffers"]:
        model.load_state_dict(own["buffers"], strict=False)


def _load_legacy(client: MlflowClient, run_id: str, client_id: int | None,
                 model: torch.nn.Module | None) -> torch.nn.Module:
    """A run recorded before the MLflow Model: ``model/global.pt`` / ``model/personal.pt``."""
    artifact = GLOBAL_ARTIFACT if client_id is None else PERSONAL_ARTIFACT
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = client.download_artifacts(run_id, artifact, tmp)
        except Exception as exc:  # noqa: BLE001
            raise LookupError(f"run {run_id}: no MLflow Model {MODEL_NAME!r} and no {artifact} "
                              f"({exc})") from None
        saved = torch.load(local, map_location="cpu", weights_only=True)
    model = _build(saved, run_id, model)
    if client_id is None:
        model.load_state_dict(saved["state_dict"])
    else:
        _personal(model, saved, run_id, client_id)
    return model.eval()
