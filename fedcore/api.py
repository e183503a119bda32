"""fedcore as a library, in one import (docs/python-api.md).

Config in: [`load_config`][fedcore.api.load_config] / [`build_config`][fedcore.api.build_config].
Own data: [`federate`][fedcore.api.federate] (numpy arrays, tensors or a torch Dataset, split by the
partitioners) or a hand-made `FederatedData`. Own model: any ``nn.Module``, class or factory
(``model=``), or ``model.name=package.module:Name``. Result out: [`run`][fedcore.api.run] /
[`Simulation`][fedcore.core.round.simulation.Simulation] give a
[`Result`][fedcore.core.round.simulation.Result] (``rounds_frame()``, ``clients_frame()``).
Recorded: [`run_tracked`][fedcore.api.run_tracked] (one MLflow run),
[`sweep_runs`][fedcore.api.sweep_runs] (a sweep's cells as a DataFrame),
[`load_model`][fedcore.api.load_model] (a run's final model). The last three need MLflow and are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fedcore.core.compose.configure import build_config, load_config
from fedcore.core.config import ConfigError, ExperimentConfig
from fedcore.core.data.federated import FederatedData
from fedcore.core.data.own import content_digest, federate
from fedcore.core.data.partition import dirichlet_partition, iid_partition, shard_partition
from fedcore.core.models import FedModel
from fedcore.core.models.protocol import EmbeddingModel
from fedcore.core.round.simulation import ClientTable, Result, Simulation, run

if TYPE_CHECKING:
    from fedcore.tracking.models import load_model
    from fedcore.tracking.results import sweep_runs
    from fedcore.tracking.runner import run_tracked

_TRACKING = {
    "load_model": "fedcore.tracking.models",
    "run_tracked": "fedcore.tracking.runner",
    "sweep_runs": "fedcore.tracking.results",
}


def __getattr__(name: str) -> Any:
    """The MLflow-backed functions, imported when first asked for; without the pipeline extra,
    a one-line ``fedcore.runtime_env.extras.MissingExtraError`` naming it."""
    if name in _TRACKING:
        from fedcore.runtime_env.extras import require_modules

        require_modules(f"fedcore.api.{name}", ("mlflow",))
        return getattr(importlib.import_module(_TRACKING[name]), name)
    raise AttributeError(f"module 'fedcore.api' has no attribute {name!r}")


__all__ = [
    "ClientTable", "ConfigError", "EmbeddingModel", "ExperimentConfig", "FedModel",
    "FederatedData", "Result", "Simulation", "build_config", "content_digest",
    "dirichlet_partition", "federate", "iid_partition", "load_config", "load_model", "run",
    "run_tracked", "shard_partition", "sweep_runs",
]
