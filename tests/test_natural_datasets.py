"""FEMNIST (LEAF JSON, one client per writer), Tiny-ImageNet (tiny-imagenet-200 folder of JPEGs)
and the ``natural`` partition, on small files written in the real on-disk formats."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, DatasetConfig
from fedcore.core.data import federated, leaf, tiny_imagenet
from fedcore.core.data.datasets import DatasetArrays, DatasetUnavailableError, load_dataset
from fedcore.core.data.federated import build_federated_data, partition_indices
from fedcore.core.data.partition import group_by_owner, natural_partition
from fedcore.core.data.tiny_imagenet import MEAN, STD
from fedcore.core.models import build_model
from fedcore.core.round.simulation import run

# writer -> (train samples, test samples), as LEAF's ``-t sample`` split writes them
WRITERS = {"f0000_14": (6, 2), "f0001_41": (4, 1), "f0002_33": (9, 3), "f0003_07": (5, 1),
           "f0004_22": (3, 1)}
E2E = ["rounds=2", "clients_per_round=2", "local.steps=2", "local.batch_size=4", "seed=3"]


# --------------------------------------------------------------------------- FEMNIST files


def leaf_samples(rng: np.random.Generator, n: int) -> tuple[list[list[float]], list[int]]:
    """n LEAF-style images: 784 floats k/255 in [0, 1], mostly white background (1.0)."""
    ink = rng.random((n, 784)) < 0.2
    x = np.where(ink, rng.integers(0, 255, (n, 784)) / 255.0, 1.0).astype(np.float32)
    return [[float(v) for v in row] for row in x], rng.integers(0, 62, n).tolist()


def write_leaf(folder: Path, users: dict[str, tuple[list, list]], per_file: int = 2) -> None:
    """LEAF JSON files ({users, num_samples, user_data: {u: {x, y}}}), ``per_file`` users each."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(users)
    for i in range(0, len(names), per_file):
        chunk = names[i : i + per_file]
        blob = {
            "users": chunk,
            "num_samples": [len(users[u][1]) for u in chunk],
            "user_data": {u: {"x": users[u][0], "y": users[u][1]} for u in chunk},
        }
        (folder / f"all_data_{i // per_file}_niid_1_keep_0.json").write_text(json.dumps(blob))


@pytest.fixture(scope="module")
def femnist_root(tmp_path_factory) -> tuple[Path, dict]:
    """<root>/femnist/{train,test}/*.json with the writers of WRITERS; returns root and data."""
    root = tmp_path_factory.mktemp("leaf")
    rng = np.random.default_rng(0)
    data = {w: (leaf_samples(rng, n_tr), leaf_samples(rng, n_te))
            for w, (n_tr, n_te) in WRITERS.items()}
    write_leaf(root / "femnist" / "train", {w: d[0] for w, d in data.items()})
    write_leaf(root / "femnist" / "test", {w: d[1] for w, d in data.items()})
    return root, data


def as_tensor(samples: tuple[list, list]) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = samples
    return torch.tensor(x, dtype=torch.float32).view(-1, 1, 28, 28), torch.tensor(y)


@pytest.mark.parametrize("parser", ["default", "stdlib"])
def test_femnist_split_files(femnist_root, monkeypatch, parser):
    if parser == "stdlib":  # the fallback when orjson is not installed
        monkeypatch.setattr(leaf, "loads", json.loads)
    root, data = femnist_root
    d = load_dataset("femnist", root=root)
    assert d.name == "femnist" and d.num_classes == 62 and d.in_shape == (1, 28, 28)
    assert d.owner_names == tuple(WRITERS)  # order of first appearance over sorted files
    assert len(d.x_train) == sum(a for a, _ in WRITERS.values()) == len(d.owner_train)
    assert len(d.x_test) == sum(b for _, b in WRITERS.values()) == len(d.owner_test)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    # values exactly as LEAF gives them: [0, 1], white background 1.0, not re-normalised
    assert d.x_train.min() >= 0 and d.x_train.max() == 1.0
    assert (d.x_train == 1.0).float().mean() > 0.7
    for k, w in enumerate(WRITERS):
        for x, y, own, part in ((d.x_train, d.y_train, d.owner_train, 0),
                                (d.x_test, d.y_test, d.owner_test, 1)):
            xw, yw = as_tensor(data[w][part])
            assert torch.equal(x[own == k], xw) and torch.equal(y[own == k], yw)


def test_femnist_natural_partition(femnist_root):
    root, data = femnist_root
    cfg = DatasetConfig(name="femnist", root=str(root), partition="natural", num_clients=3)
    fd = build_federated_data(cfg, seed=0)
    assert fd.num_clients == 3 and fd.num_classes == 62 and fd.in_shape == (1, 28, 28)
    # each client is one writer with exactly its own LEAF train and test samples
    own = {}
    for c in fd.clients:
        match = [w for w in WRITERS if torch.equal(c.x_train, as_tensor(data[w][0])[0])]
        assert len(match) == 1
        w = match[0]
        own[c.client_id] = w
        assert (c.num_train, len(c.y_test)) == WRITERS[w]
        assert torch.equal(c.y_train, as_tensor(data[w][0])[1])
        assert torch.equal(c.x_test, as_tensor(data[w][1])[0])
        assert torch.equal(c.y_test, as_tensor(data[w][1])[1])
    assert len(set(own.values())) == 3
    assert [list(WRITERS).index(w) for w in own.values()] == sorted(
        list(WRITERS).index(w) for w in own.values()
    )  # clients in writer order
    # global test set: the union of the chosen writers' test samples
    assert torch.equal(fd.x_test, torch.cat([c.x_test for c in fd.clients]))
    assert torch.equal(fd.y_test, torch.cat([c.y_test for c in fd.clients]))
    # determinism: the same seed chooses the same writers; other seeds choose others
    again = build_federated_data(cfg, seed=0)
    pairs = zip(fd.clients, again.clients, strict=True)
    assert all(torch.equal(a.x_train, b.x_train) for a, b in pairs)
    chosen = {tuple(natural_choice(root, cfg, s)) for s in range(6)}
    assert len(chosen) > 1 and all(len(c) == 3 for c in chosen)
    every = build_federated_data(cfg.model_copy(update={"num_clients": 5}), seed=1)
    assert [c.num_train for c in every.clients] == [a for a, _ in WRITERS.values()]


def natural_choice(root: Path, cfg: DatasetConfig, seed: int) -> list[int]:
    """Indices of the writers chosen under ``seed``, via the client sizes and first labels."""
    fd = build_federated_data(cfg, seed=seed)
    d = load_dataset("femnist", root=root)
    out = []
    for c in fd.clients:
        k = next(k for k in range(len(WRITERS)) if torch.equal(d.x_train[d.owner_train == k],
                                                              c.x_train))
        out.append(k)
    return out


def test_femnist_all_data_layout(tmp_path):
    rng = np.random.default_rng(1)
    users = {f"w{i}": leaf_samples(rng, n) for i, n in enumerate((10, 2, 1, 7))}
    write_leaf(tmp_path / "femnist" / "all_data", users, per_file=3)
    d = load_dataset("femnist", root=tmp_path, seed=5, global_test_fraction=0.2)
    assert d.owner_names == ("w0", "w1", "w2", "w3")
    for k, (x, y) in enumerate(users.values()):
        n_te = int((d.owner_test == k).sum())
        assert n_te == {10: 2, 2: 1, 1: 0, 7: 1}[len(y)]  # at least one test sample when n >= 2
        assert int((d.owner_train == k).sum()) == len(y) - n_te
        xs = torch.cat([d.x_train[d.owner_train == k], d.x_test[d.owner_test == k]])
        got = sorted(map(tuple, xs.view(len(y), -1).tolist()))
        assert got == sorted(map(tuple, as_tensor((x, y))[0].view(len(y), -1).tolist()))
    same = load_dataset("femnist", root=tmp_path, seed=5, global_test_fraction=0.2)
    assert torch.equal(same.x_test, d.x_test) and torch.equal(same.owner_test, d.owner_test)
    # natural: the single-sample writer (no test sample) is not eligible
    cfg = DatasetConfig(name="femnist", root=str(tmp_path), partition="natural", num_clients=3)
    fd = build_federated_data(cfg, seed=5)
    assert sorted(c.num_train + len(c.y_test) for c in fd.clients) == [2, 7, 10]
    with pytest.raises(ConfigError, match=r"num_clients=4 exceeds the 3 owners .* 1\.\.3"):
        build_federated_data(cfg.model_copy(update={"num_clients": 4}), seed=5)


def test_femnist_writers_only_in_test_are_rejected(tmp_path):
    """LEAF's ``-t user`` split puts whole writers in train or test: no natural clients."""
    rng = np.random.default_rng(2)
    write_leaf(tmp_path / "femnist" / "train", {"a": leaf_samples(rng, 3)})
    write_leaf(tmp_path / "femnist" / "test", {"b": leaf_samples(rng, 3)})
    cfg = DatasetConfig(name="femnist", root=str(tmp_path), partition="natural", num_clients=1)
    with pytest.raises(ConfigError, match="-t sample"):
        build_federated_data(cfg, seed=0)
    # any other partition pools the writers' train samples; the test files are the global test
    fd = build_federated_data(cfg.model_copy(update={"partition": "iid"}), seed=0)
    assert len(fd.y_test) == 3 and fd.clients[0].num_train + len(fd.clients[0].y_test) == 3


# --------------------------------------------------------------------------- natural, generic


def test_natural_partition_any_dataset_with_owner_ids(monkeypatch):
    """A dataset with owner ids on its train samples only: one client per owner, each owner's
    samples split by test_fraction; the dataset's own test split stays the global test set."""
    n = 84
    ids = torch.arange(n, dtype=torch.float32)
    owners = (torch.arange(n) ** 2) % 7  # owners of unequal sizes (12, 24, 24, 0, 24, 0, 0)
    arrays = DatasetArrays(ids.view(n, 1, 1, 1), torch.arange(n) % 3, -ids[:9].view(9, 1, 1, 1),
                           torch.arange(9) % 3, 3, "synthetic", owner_train=owners)
    monkeypatch.setattr(federated, "load_dataset", lambda *a, **k: arrays)
    cfg = DatasetConfig(partition="natural", num_clients=3, test_fraction=0.25)
    fd = build_federated_data(cfg, seed=2)
    assert fd.num_clients == 3 and torch.equal(fd.x_test, arrays.x_test)
    seen = set()
    for c in fd.clients:
        got = torch.cat([c.x_train, c.x_test]).flatten().long().sort().values
        k = int(owners[got[0]])
        assert torch.equal(got, torch.nonzero(owners == k).flatten())
        assert len(c.y_test) == round(0.25 * len(got))
        assert torch.equal(c.y_train, arrays.y_train[c.x_train.flatten().long()])
        seen.add(k)
    assert len(seen) == 3 and seen <= {0, 1, 2, 4}  # owners 3, 5, 6 have no samples
    # the pure partitioner: owners drawn without replacement, index sets exactly theirs
    chosen, parts = natural_partition(owners.numpy(), 4, np.random.default_rng(0))
    assert chosen.tolist() == [0, 1, 2, 4]
    for o, idx in zip(chosen, parts, strict=True):
        assert np.array_equal(idx, np.flatnonzero(owners.numpy() == o))
    groups = group_by_owner(np.array([2, 0, 2, 1]))
    assert list(groups) == [0, 1, 2] and groups[2].tolist() == [0, 2]
    with pytest.raises(ValueError, match="num_clients=5 exceeds the 4 owners"):
        natural_partition(owners.numpy(), 5, np.random.default_rng(0))
    # no owner ids: a one-line config error
    with pytest.raises(ConfigError, match="'natural' needs per-sample owner ids"):
        partition_indices(arrays.y_train.numpy(), cfg, 0, owners=None)


def test_config_accepts_natural_only_with_owner_ids(tmp_path):
    cfg = load_config(None, ["dataset.name=femnist", "dataset.partition=natural"])
    assert (cfg.dataset.name, cfg.dataset.partition) == ("femnist", "natural")
    load_config(None, ["dataset.name=tiny_imagenet", "dataset.partition=dirichlet"])
    with pytest.raises(ConfigError) as e:
        load_config(None, ["dataset.name=cifar10", "dataset.partition=natural"])
    msg = str(e.value)
    assert msg.startswith("dataset.partition: 'natural'") and "dataset.name='cifar10'" in msg
    assert msg.endswith("allowed: iid, dirichlet, shards") and "\n" not in msg
    with pytest.raises(ConfigError, match="dataset.download: femnist cannot be downloaded"):
        load_config(None, ["dataset.name=femnist", "dataset.download=true"])
    from fedcore.specs.sweep import load_sweep

    sweep = tmp_path / "s.yaml"
    sweep.write_text(json.dumps({"name": "nat", "grid": {
        "dataset.name": ["femnist", "tiny_imagenet"], "dataset.partition": ["dirichlet"]},
        "set": {"rounds": 1}}))
    assert len(load_sweep(sweep, {"dataset.num_clients": 3, "clients_per_round": 3}).cells) == 2
    assert load_sweep(sweep, {"dataset.name": "femnist", "dataset.partition": "natural"})
    with pytest.raises(ConfigError, match="'natural' needs per-sample owner ids"):
        load_sweep(sweep, {"dataset.partition": "natural"})  # the tiny_imagenet cell


# --------------------------------------------------------------------------- Tiny-ImageNet files

WNIDS = ["n02124075", "n01443537", "n04067472"]  # a real folder lists 200 in wnids.txt


def colour(label: int, i: int) -> tuple[int, int, int]:
    return 40 + 80 * label, 20 + 30 * i, 200 - 25 * i


def write_tiny_imagenet(root: Path, n_train: int = 3, n_val: int = 2) -> Path:
    """tiny-imagenet-200 with len(WNIDS) classes of flat-colour 64x64 JPEGs (one greyscale)."""
    folder = root / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for label, w in enumerate(WNIDS):
        (folder / "train" / w / "images").mkdir(parents=True)
        (folder / "train" / w / f"{w}_boxes.txt").write_text("")
        for i in range(n_train):
            img = Image.new("RGB", (64, 64), colour(label, i))
            if label == 2 and i == 0:
                img = Image.new("L", (64, 64), 128)
            img.save(folder / "train" / w / "images" / f"{w}_{i}.JPEG", format="JPEG", quality=95)
    lines = []
    for j in range(n_val * len(WNIDS)):
        label = (j * 2) % len(WNIDS)  # not in class order
        Image.new("RGB", (64, 64), colour(label, j)).save(
            folder / "val" / "images" / f"val_{j}.JPEG", format="JPEG", quality=95)
        lines.append(f"val_{j}.JPEG\t{WNIDS[label]}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return folder


def pixels(x: torch.Tensor) -> torch.Tensor:
    """Undo the normalisation: 0..255 per channel."""
    m, s = torch.tensor(MEAN).view(1, 3, 1, 1), torch.tensor(STD).view(1, 3, 1, 1)
    return (x * s + m) * 255


@pytest.mark.parametrize("reader", ["torchvision", "pil"])
def test_tiny_imagenet_folder(tmp_path, monkeypatch, reader):
    monkeypatch.setattr(tiny_imagenet, "read_rgb", getattr(tiny_imagenet, f"read_rgb_{reader}"))
    write_tiny_imagenet(tmp_path)
    d = load_dataset("tiny_imagenet", root=tmp_path)
    assert d.name == "tiny_imagenet" and d.num_classes == 3 and d.in_shape == (3, 64, 64)
    assert d.x_train.shape == (9, 3, 64, 64) and d.x_test.shape == (6, 3, 64, 64)
    assert d.x_train.dtype == torch.float32 and d.owner_train is None
    assert d.y_train.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # wnids.txt order, not sorted
    assert d.y_test.tolist() == [0, 2, 1, 0, 2, 1]  # val_annotations.txt order
    lo = (-torch.tensor(MEAN) / torch.tensor(STD)).min()
    hi = ((1 - torch.tensor(MEAN)) / torch.tensor(STD)).max()
    assert lo <= d.x_train.min() and d.x_train.max() <= hi
    px = pixels(d.x_train).mean(dim=(2, 3))
    for n, (label, i) in enumerate((c, i) for c in range(3) for i in range(3)):
        want = (128, 128, 128) if (label, i) == (2, 0) else colour(label, i)  # greyscale -> RGB
        assert torch.allclose(px[n], torch.tensor(want, dtype=torch.float32), atol=3), (n, px[n])
    pv = pixels(d.x_test).mean(dim=(2, 3))
    for j, label in enumerate(d.y_test.tolist()):
        assert torch.allclose(pv[j], torch.tensor(colour(label, j), dtype=torch.float32), atol=3)
    again = load_dataset("tiny_imagenet", root=tmp_path)
    assert torch.equal(again.x_train, d.x_train) and torch.equal(again.x_test, d.x_test)


def test_tiny_imagenet_partitions(tmp_path):
    write_tiny_imagenet(tmp_path, n_train=6)
    for part in ("iid", "dirichlet", "shards"):
        cfg = DatasetConfig(name="tiny_imagenet", root=str(tmp_path), partition=part,
                            num_clients=3, min_samples=2, alpha=0.5, test_fraction=0.2)
        fd = build_federated_data(cfg, seed=1)
        assert fd.num_clients == 3 and fd.in_shape == (3, 64, 64) and len(fd.y_test) == 6
        assert sum(c.num_train + len(c.y_test) for c in fd.clients) == 18


# --------------------------------------------------------------------------- offline errors


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_missing_and_corrupt_files(tmp_path, no_network):
    where = tmp_path / "nowhere"
    for name, folder, files in (
        ("femnist", "femnist", ["train/*.json", "test/*.json", "all_data/*.json", "preprocess.sh"]),
        ("tiny_imagenet", "tiny-imagenet-200",
         ["wnids.txt", "train/<wnid>/images/*.JPEG", "val/val_annotations.txt"]),
    ):
        with pytest.raises(DatasetUnavailableError) as e:
            load_dataset(name, root=where)
        msg = str(e.value)
        assert "\n" not in msg and "not found" in msg and str(where / folder) in msg
        assert all(f in msg for f in files), msg
    with pytest.raises(DatasetUnavailableError, match="download failed .no network"):
        load_dataset("tiny_imagenet", root=where, download=True)

    write_leaf(tmp_path / "femnist" / "train", {"a": leaf_samples(np.random.default_rng(0), 2)})
    with pytest.raises(DatasetUnavailableError, match=r"found train/\*\.json but no test/\*\.json"):
        load_dataset("femnist", root=tmp_path)
    (tmp_path / "femnist" / "test").mkdir()
    (tmp_path / "femnist" / "test" / "t.json").write_text('{"users": ["a"], "user_da')
    with pytest.raises(DatasetUnavailableError, match="could not be read .JSONDecodeError"):
        load_dataset("femnist", root=tmp_path)

    folder = write_tiny_imagenet(tmp_path / "t")
    Image.new("RGB", (32, 32)).save(folder / "val" / "images" / "val_0.JPEG", format="JPEG")
    with pytest.raises(DatasetUnavailableError, match=r"val_0.JPEG is \(3, 32, 32\)"):
        load_dataset("tiny_imagenet", root=tmp_path / "t")


@pytest.mark.slow
def test_cli_missing_dataset_exits_2(tmp_path, tracking, capsys):
    from fedcore.cli import main

    for name in ("femnist", "tiny_imagenet"):
        extra = ["dataset.partition=natural"] if name == "femnist" else []
        assert main(["run", f"dataset.name={name}", f"dataset.root={tmp_path}", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fedcore: error: dataset '{name}': files not")


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_femnist_end_to_end_deterministic(femnist_root):
    root, _ = femnist_root
    args = ["dataset.name=femnist", f"dataset.root={root}", "dataset.partition=natural",
            "dataset.num_clients=4", "model.name=mlp", *E2E]
    a, b = run(load_config(None, args)), run(load_config(None, args))
    assert len(a.history) == 2 and 0 <= a.history[-1]["test/accuracy"] <= 1
    strip = [{k: v for k, v in h.items() if k != "agg/seconds"} for h in a.history]
    assert strip == [{k: v for k, v in h.items() if k != "agg/seconds"} for h in b.history]
    assert a.summary == b.summary
    assert len(a.client_tables[-1].client_id) == 4


@pytest.mark.slow
def test_tiny_imagenet_end_to_end_and_models(tmp_path):
    write_tiny_imagenet(tmp_path)
    cfg = load_config(None, ["dataset.name=tiny_imagenet", f"dataset.root={tmp_path}",
                             "dataset.partition=iid", "dataset.num_clients=3",
                             "dataset.min_samples=0", "model.name=mlp", *E2E])
    result = run(cfg)
    assert len(result.history) == 2 and np.isfinite(result.history[-1]["test/loss"])
    x = torch.randn(2, 3, 64, 64)
    for name in ("resnet20", "cnn", "mlp"):
        model = build_model(name, (3, 64, 64), 200).eval()
        assert model(x).shape == (2, 200) and model.features(x).shape == (2, model.embed_dim)
