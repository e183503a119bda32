"""Hugging Face data as federations (issue 48): a small dataset built in memory, saved with
``save_to_disk`` and loaded back, split by an id column, by Dirichlet or by a partitioner; no
network."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedcore.core.compose.configure import build_config, load_config
from fedcore.core.config import ConfigError
from fedcore.core.data.federated import shared_federated_data
from fedcore.core.data.own import content_digest, federate
from fedcore.core.round.simulation import Simulation

datasets = pytest.importorskip("datasets")  # the optional extra hub (in the lock)

N, WRITERS = 160, 6


def table(n: int = N, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return datasets.Dataset.from_dict({
        "image": rng.normal(size=(n, 1, 8, 8)).astype(np.float32).tolist(),
        "label": rng.integers(0, 3, n).tolist(),
        "writer": [f"w{k}" for k in rng.integers(0, WRITERS, n)],
    })


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    folder = tmp_path / "writers"
    table().save_to_disk(str(folder))
    return folder


def rows_of(data: Any) -> list[np.ndarray]:
    return [np.concatenate(p) for p in data.partition]


def test_a_saved_dataset_is_split_one_client_per_id(saved: Path) -> None:
    data = federate(saved, features="image", label="label", by="writer", test_fraction=0.25)
    ds = datasets.load_from_disk(str(saved))
    writers = np.asarray(ds["writer"])
    assert data.num_clients == WRITERS
    owners = [set(writers[rows].tolist()) for rows in rows_of(data)]
    assert all(len(o) == 1 for o in owners) and len(set.union(*owners)) == WRITERS
    taken = np.concatenate(rows_of(data))
    assert len(taken) + len(data.y_test) == N and len(np.unique(taken)) == len(taken)
    assert data.clients[0].x_train.shape[1:] == (1, 8, 8)
    record = data.record
    assert record is not None and record.digest == content_digest(data)
    assert str(saved.resolve()) in record.source and "clients by column writer" in record.source
    again = federate(saved, features="image", label="label", by="writer", test_fraction=0.25)
    assert again.record is not None and again.record.digest == record.digest
    three = federate(saved, features="image", label="label", by="writer", num_clients=3)
    assert three.num_clients == 3


def test_a_dataset_dicts_test_split_is_the_global_test_set() -> None:
    dd = datasets.DatasetDict({"train": table(), "test": table(40, seed=1)})
    data = federate(dd, features="image", label="label", by="writer")
    assert len(data.y_test) == 40
    assert np.array_equal(data.y_test.numpy(), np.asarray(dd["test"]["label"]))


def test_dirichlet_and_a_partitioner_split_hub_data() -> None:
    ds = table()
    data = federate(ds, features="image", label="label", partition="dirichlet", alpha=0.5,
                    num_clients=4, min_samples=5)
    assert data.num_clients == 4 and data.record is not None
    assert data.record.partition == "dirichlet"

    class Shards:  # Flower Datasets' IidPartitioner protocol: dataset, num_partitions, load
        def __init__(self, n: int) -> None:
            self.num_partitions, self._ds = n, None

        @property
        def dataset(self) -> Any:
            return self._ds

        @dataset.setter
        def dataset(self, value: Any) -> None:
            self._ds = value

        def load_partition(self, i: int) -> Any:
            return self._ds.shard(self.num_partitions, i, contiguous=True)

    split = federate(ds, features="image", label="label", partitioner=Shards(5))
    assert split.num_clients == 5
    assert all(np.all(np.diff(np.sort(rows)) >= 1) for rows in rows_of(split))
    assert "clients by Shards" in (split.record.source if split.record else "")


def test_flower_datasets_partitioners_work_when_installed() -> None:
    partitioners = pytest.importorskip("flwr_datasets.partitioner")
    data = federate(table(), features="image", label="label",
                    partitioner=partitioners.IidPartitioner(num_partitions=4))
    assert data.num_clients == 4


def test_the_config_names_a_saved_folder_and_records_its_digest(saved: Path) -> None:
    overrides = [f"dataset.name=hf:{saved}", "dataset.features=image", "dataset.label=label",
                 "dataset.by=writer", "dataset.partition=natural", "dataset.num_clients=4",
                 "clients_per_round=2", "rounds=1", "model.name=mlp", "local.steps=2"]
    cfg = load_config(None, overrides)
    sim = Simulation(cfg)
    assert sim.cfg.dataset.digest == content_digest(sim.data) and sim.data.num_clients == 4
    # hashed by its settings, like a dataset on disk: a sweep finds the runs of its cells
    assert sim.cfg.config_hash() == cfg.config_hash() and cfg.dataset.digest is None
    assert sim.cfg.dataset.name == f"hf:{saved}" and sim.cfg.dataset.by == "writer"
    assert "test/accuracy" in sim.run().history[-1]
    again = Simulation(build_config(sim.cfg.resolved()))  # the recorded config reruns
    assert again.cfg.config_hash() == sim.cfg.config_hash()
    table(seed=5).save_to_disk(str(saved.parent / "other"))
    moved = sim.cfg.resolved()
    moved["dataset"]["name"] = f"hf:{saved.parent / 'other'}"
    with pytest.raises(ConfigError, match=r"^dataset.digest: the data at .* has digest"):
        Simulation(build_config(moved))


def test_the_command_line_and_a_sweeps_shared_data_build_a_saved_folder(
        saved: Path, tracking: Any) -> None:
    from fedcore.cli import main

    overrides = [f"dataset.name=hf:{saved}", "dataset.features=image", "dataset.label=label",
                 "dataset.by=writer", "dataset.partition=natural", "dataset.num_clients=3",
                 "clients_per_round=2", "rounds=1", "model.name=mlp", "local.steps=2"]
    cfg = load_config(None, overrides)
    shared = shared_federated_data(cfg.dataset, cfg.seed)
    assert shared.record is not None and shared.num_clients == 3
    assert shared.record.digest == content_digest(shared)
    assert main(["run", *overrides]) == 0
    from mlflow import MlflowClient

    client = MlflowClient(tracking.tracking_uri)
    exp = client.get_experiment_by_name(tracking.experiment).experiment_id
    (run,) = client.search_runs([exp], f"tags.config_hash = '{cfg.config_hash()}'")
    assert run.data.params["dataset.digest"] == shared.record.digest


@pytest.mark.parametrize(("overrides", "message"), [
    (["dataset.name=hf:/nowhere"], "dataset.features: 'hf:/nowhere' needs its feature and "
     "label columns named"),
    (["dataset.features=image"], "dataset.features: only for Hugging Face data"),
    (["dataset.name=hf:/x", "dataset.features=a", "dataset.label=b", "dataset.partition=natural"],
     "dataset.by: partition natural of Hugging Face data needs the id column"),
    (["dataset.name=hf:/x", "dataset.features=a", "dataset.label=b", "dataset.by=w"],
     "dataset.by: only with dataset.partition=natural"),
])
def test_bad_hub_settings_are_one_line_config_errors(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_columns_and_arguments_are_named(saved: Path) -> None:
    with pytest.raises(ConfigError, match="^by: no column 'author'; allowed: image, label, "
                       "writer$"):
        federate(saved, features="image", label="label", by="author")
    with pytest.raises(ConfigError, match="^features: Hugging Face data needs"):
        federate(saved, label="label")
    with pytest.raises(ConfigError, match="^features: features, label, by"):
        federate(np.zeros((4, 2)), np.array([0, 1, 0, 1]), by="writer")


def test_the_core_imports_and_names_the_extra_without_datasets() -> None:
    code = ("import sys; sys.modules['datasets'] = None\n"
            "import fedcore.core.round.simulation\n"
            "from fedcore.core.data.own import federate\n"
            "from fedcore.core.config import ConfigError\n"
            "try:\n    federate('hf:/x', features='a', label='b')\n"
            "except ConfigError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == ("dataset: Hugging Face data needs the optional extra hub "
                           "(pip install 'fedcore-fl[hub]')")
