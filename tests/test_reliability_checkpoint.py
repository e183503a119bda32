"""Checkpoints that must not resume (docs/how-to/checkpoints.md): another config's, one
edited, corrupted or forged after it was written (its HMAC), and one inconsistent with the run (a
round beyond ``rounds``, a history that does not match its round, parameters of another shape)
are refused when loaded, in one line naming the file, what is wrong and the remedy."""

from __future__ import annotations

import logging

import pytest
import torch

from fedcore.core.compose.configure import load_config
from fedcore.core.round import checkpoint
from fedcore.core.round.checkpoint import signing
from fedcore.core.round.simulation import Simulation
from tests.conftest import TINY


def _setup(tmp_path, *extra):
    cfg = load_config(None, [*TINY, "rounds=4", "checkpoint_every=1",
                             f"checkpoint_dir={tmp_path / 'ck'}", *extra])
    sim = Simulation(cfg)
    return cfg, sim, sim.state_dict()  # round 0: a real state, no training needed


def _refused(cfg, path, problem: str) -> None:
    sim = Simulation(cfg)
    start = sim.params.clone()
    with pytest.raises(checkpoint.CheckpointError) as e:
        sim.resume()
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 400, msg
    assert msg.startswith(f"checkpoint {path} cannot be resumed: {problem}"), msg
    assert msg.endswith(f"; delete the folder {path.parent} and rerun from round 1")
    assert sim.round == 0 and torch.equal(sim.params, start) and not sim.history


def test_another_configs_checkpoint_names_the_file_and_the_remedy(tmp_path):
    cfg, _, state = _setup(tmp_path)
    other = load_config(None, [*TINY, "rounds=4", "seed=1", f"checkpoint_dir={tmp_path / 'ck'}"])
    path = checkpoint.save(state, checkpoint.run_folder(other), 1)  # copied into other's folder
    _refused(other, path, f"it is a checkpoint of config '{cfg.config_hash()}', not of this "
                          f"run's config {other.config_hash()}")


def test_round_beyond_rounds_with_a_faked_history_is_refused(tmp_path):
    cfg, _, state = _setup(tmp_path)
    state.update(round=99, history=[{"round": r, "test/accuracy": 0.999} for r in range(1, 100)])
    path = checkpoint.save(state, checkpoint.run_folder(cfg), 99)  # with a matching digest
    _refused(cfg, path, "its round 99 is not in 0..4 (rounds=4)")


def test_history_or_tables_inconsistent_with_the_round_are_refused(tmp_path):
    cfg, _, state = _setup(tmp_path)
    state.update(round=2, history=[{"round": 2, "test/accuracy": 0.999}])
    path = checkpoint.save(state, checkpoint.run_folder(cfg), 2)
    _refused(cfg, path, "its history does not hold rounds 1..2 once each (got [2])")
    state.update(history=[{"round": 1}, {"round": 2}])  # no per-client tables of rounds 1, 2
    path = checkpoint.save(state, checkpoint.run_folder(cfg), 2)
    _refused(cfg, path, "its per-client tables are of rounds [], not [1, 2]")


def test_truncated_parameters_are_refused_when_loaded(tmp_path):
    cfg, sim, state = _setup(tmp_path)
    state["params"] = state["params"][:-7]
    path = checkpoint.save(state, checkpoint.run_folder(cfg), 0)
    n = sim.params.numel()
    _refused(cfg, path, f"its params are torch.float32 ({n - 7},), this run's model has "
                        f"torch.float32 ({n},)")


def test_a_file_edited_after_it_was_written_fails_its_hmac(tmp_path, caplog):
    cfg, _, state = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    path = checkpoint.save(state, folder, 1)
    raw = torch.load(path, weights_only=True)
    raw["history"] = [{"round": 1, "test/accuracy": 0.999}]  # edited; the old HMAC kept
    torch.save(raw, path)
    with pytest.raises(checkpoint.CheckpointError, match=(
        f"^checkpoint {path} cannot be resumed: its HMAC does not match")):
        checkpoint.load(path)
    del raw["hmac"]  # or dropped
    torch.save(raw, path)
    with pytest.raises(checkpoint.CheckpointError, match="it carries no HMAC signature"):
        checkpoint.load(path)
    with caplog.at_level(logging.WARNING, "fedcore"):
        assert checkpoint.latest(folder) is None  # not resumed: the run starts at round 1
    assert f"checkpoint {path} does not load" in caplog.text


def test_a_forged_checkpoint_with_its_digest_recomputed_is_refused(tmp_path, monkeypatch):
    """The forger edits the file and recomputes every digest it can without the key (a plain
    SHA-256, or an HMAC under a key of its own): the file is refused (it resumed at a faked
    0.999 with no round trained when the digest was a plain SHA-256)."""
    import hashlib
    import hmac

    monkeypatch.delenv(checkpoint.KEY_ENV, raising=False)
    cfg, _, state = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    path = checkpoint.save(state, folder, 1)
    key_file = folder.parent / checkpoint.KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    raw = torch.load(path, weights_only=True)
    del raw["hmac"]
    raw["history"] = [{"round": 1, "test/accuracy": 0.999}]
    for forged in (hashlib.sha256(), hmac.new(b"guessed key", digestmod=hashlib.sha256)):
        signing._feed(forged, raw)
        torch.save({**raw, "hmac": forged.hexdigest(), "digest": forged.hexdigest()}, path)
        with pytest.raises(checkpoint.CheckpointError, match="its HMAC does not match"):
            checkpoint.load(path)
    # with the key the file is genuine: the key is what is trusted
    torch.save({**raw, "hmac": checkpoint.digest(raw, checkpoint.key_for(folder.parent))}, path)
    assert checkpoint.load(path)["history"][0]["test/accuracy"] == 0.999
    monkeypatch.setenv(checkpoint.KEY_ENV, "another key")  # the env key replaces the file's
    with pytest.raises(checkpoint.CheckpointError, match="written under another key"):
        checkpoint.load(path)


def test_a_checkpoint_folder_removed_while_saving_is_made_again(tmp_path, monkeypatch):
    """Two identical runs at once: the first to finish deletes the run folder while the other
    writes its next checkpoint there (it failed with FileNotFoundError)."""
    import shutil

    cfg, _, state = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    real_save = torch.save
    removed = []

    def save_after_removal(obj, fh):
        if not removed:
            removed.append(True)
            shutil.rmtree(folder)  # the other run finished meanwhile
            raise FileNotFoundError(2, "No such file or directory", str(fh.name))
        real_save(obj, fh)

    monkeypatch.setattr(torch, "save", save_after_removal)
    path = checkpoint.save(state, folder, 1)
    assert removed and path.is_file() and checkpoint.load(path)["round"] == 0
    shutil.rmtree(folder)
    assert checkpoint.checkpoint_files(folder) == []


def test_digest_covers_every_part_of_the_state():
    base = {"a": torch.arange(4.0), "b": [1, 2.5, "x", None, True], "c": {"d": (1, 2)}}
    d = checkpoint.digest(base, b"k")
    assert checkpoint.digest({**base}, b"k") == d
    assert checkpoint.digest(base, b"other key") != d
    for changed in ({**base, "a": torch.arange(4.0).double()},
                    {**base, "a": torch.arange(4.0).reshape(2, 2)},
                    {**base, "a": torch.tensor([0.0, 1.0, 2.0, 3.5])},
                    {**base, "b": [1, 2.5, "x", None, 1]},
                    {**base, "c": {"d": [1, 2]}}):
        assert checkpoint.digest(changed, b"k") != d


def test_an_unsigned_checkpoint_of_another_code_digest_is_refused(tmp_path, caplog):
    """A run with a plugin component has a code digest other than fedcore's: its checkpoint with
    the ``hmac`` key deleted and a faked history was loaded and resumed (it ended FINISHED at
    0.999 with no round trained). Every file needs its signature, whatever code wrote it."""
    cfg, _, state = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    plugin = "0123456789abcdef-plugin-digest"
    path = checkpoint.save(state, folder, 1, code=plugin)
    raw = torch.load(path, weights_only=True)
    del raw["hmac"]
    raw["history"] = [{"round": 1, "test/accuracy": 0.999}]
    torch.save(raw, path)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(path)
    msg = str(e.value)
    assert msg == (f"checkpoint {path} cannot be resumed: it carries no HMAC signature "
                   "(unsigned files are not trusted, whichever code wrote them); delete the "
                   f"folder {folder} and rerun from round 1")
    with caplog.at_level(logging.WARNING, "fedcore"):
        assert checkpoint.latest(folder, plugin) is None  # the run starts at round 1
    assert f"checkpoint {path} does not load" in caplog.text
    # the MLflow copy is read by the same load: refused alike, naming where it came from
    with pytest.raises(checkpoint.CheckpointError, match="^checkpoint MLflow copy cannot be "
                       "resumed: it carries no HMAC signature"):
        checkpoint.load(path, origin="MLflow copy")


def test_a_run_that_starts_afresh_keeps_its_own_checkpoints_over_later_rounds(tmp_path,
                                                                             tracking):
    """A killed `fedcore tune` trial left rounds 5 and 6 in its folder; the retry (same config,
    not resumed) wrote round 1 there, pruning by round number deleted it, the upload failed with
    FileNotFoundError and the trial was FAIL with its folder never removed (3 of 3)."""
    from fedcore.tracking.runner import run_tracked

    cfg, _, state = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    for r in (5, 6):  # the killed run's files
        checkpoint.save(state, folder, r)
    path = checkpoint.save(state, folder, 1)
    assert path.is_file() and [p.name for p in checkpoint.checkpoint_files(folder)] == [
        "round-000001.pt"]
    for r in (5, 6):
        checkpoint.save(state, folder, r)
    _, result = run_tracked(cfg, resume=False, figures=False)  # as a tune trial runs
    assert len(result.history) == 4 and not folder.exists()


def test_a_fifo_named_like_a_checkpoint_does_not_hang_the_run(tmp_path, caplog):
    """A FIFO ``round-000005.pt`` in the run folder hung `fedcore run` (reading it waits for a
    writer), which then ignored SIGTERM; it is not a regular file, so it is not read."""
    import os
    import threading

    cfg, _, _ = _setup(tmp_path)
    folder = checkpoint.run_folder(cfg)
    folder.mkdir(parents=True)
    fifo = folder / "round-000005.pt"
    os.mkfifo(fifo)
    outcome: dict = {}

    def resume() -> None:
        with pytest.raises(checkpoint.CheckpointError) as e:
            checkpoint.load(fifo)
        outcome["error"] = str(e.value)
        outcome["resumed"] = Simulation(cfg).resume()

    with caplog.at_level(logging.WARNING, "fedcore"):
        worker = threading.Thread(target=resume, daemon=True)
        worker.start()
        worker.join(60)
    assert not worker.is_alive(), "reading the FIFO hung"
    assert outcome["error"] == (f"checkpoint {fifo} cannot be resumed: it is not a regular "
                                f"file; delete the folder {folder} and rerun from round 1")
    assert outcome["resumed"] is False  # the run starts at round 1
