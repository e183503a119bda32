"""Hostile YAML and oversized input (docs/explanation/reliability.md,
fedcore/core/config/limits.py): anchor/alias bombs, duplicate keys, true/false as a number,
undecodable files, deep nesting and huge strings are refused with one short line naming the file or
key, exit code 2, before the MLflow store exists."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fedcore.cli import main
from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError, limits, safe_yaml
from tests.conftest import TINY

# these tests check that nothing creates the store, or how it is created: no ready-made copy
pytestmark = pytest.mark.new_store


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short folder: the errors elide long paths, and pytest-xdist's are longer (popen-gw1/)."""
    folder = Path(tempfile.mkdtemp(prefix="fcy-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _bomb(levels: int, at: str) -> str:
    """A YAML anchor/alias bomb: ``levels`` levels of 9 aliases each, used at key ``at``."""
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{at}\n"


def _refused(capsys, tmp_path: Path, argv: list[str]) -> str:
    """Exit code 2, one line under 400 characters, and no MLflow store created."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcore: error: ") and "\n" not in err and "Traceback" not in err
    assert len(err) < 400, len(err)
    assert not (tmp_path / "mlflow.db").exists()
    return err


BOMB_SITES = {
    "rounds": "rounds: *a8",
    "dataset.root": "dataset: {root: *a8}",
    "aggregator labels": "method: {name: x, client: {algorithm: fedavg}, "
                         "aggregator: {rule: crf, labels: *a8}}",
}


@pytest.mark.parametrize("site", sorted(BOMB_SITES))
def test_anchor_bomb_in_a_config_file_is_refused(capsys, tracking, tmp_path, site):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(9, BOMB_SITES[site]))
    assert path.stat().st_size < 500  # the probe's bombs were 321-429 bytes
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert str(path) in err and "once aliases are expanded" in err


def test_anchor_bomb_in_a_sweep_grid_is_refused_before_prefect(capsys, tracking, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(_bomb(9, "name: b\ngrid: {local.lr: *a8}"))
    err = _refused(capsys, tmp_path, ["sweep", str(path)])
    assert str(path) in err and "once aliases are expanded" in err


def test_anchor_bomb_as_an_override_is_one_short_line(capsys, tracking, tmp_path):
    bomb = "[&a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]" + "".join(
        f", &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 8)) + "]"
    err = _refused(capsys, tmp_path, ["run", *TINY, f"rounds={bomb}"])
    assert "override 'rounds=" in err and "once aliases are expanded" in err


def test_a_bomb_under_the_limits_is_refused_without_its_repr(capsys, tracking, tmp_path):
    path = tmp_path / "small_bomb.yaml"
    path.write_text(_bomb(4, "rounds: *a3"))  # 820 values: within the limits, not an int
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert err.startswith("fedcore: error: rounds: Input should be a valid integer (got [")


def test_too_many_aliases_and_recursive_aliases_are_refused(tmp_path):
    many = tmp_path / "many.yaml"
    many.write_text("x: &x 1\nl: [" + ",".join(["*x"] * (limits.ALIASES + 1)) + "]\n")
    with pytest.raises(ConfigError, match=rf"many.yaml' line 2: more than {limits.ALIASES} al"):
        load_config(many)
    loop = tmp_path / "loop.yaml"
    loop.write_text("rounds: 2\nx: &x [*x]\n")
    with pytest.raises(ConfigError, match="loop.yaml' line 2: a recursive alias"):
        load_config(loop)


def test_plain_anchors_and_merge_keys_still_work(tmp_path):
    text = ("defaults: &d {num_clients: 6, alpha: 0.5}\nsweep: {<<: *d, alpha: 0.3}\n"
            "lrs: [&lr 0.03, *lr]\n")
    assert safe_yaml.load(text, "t") == yaml.safe_load(text)
    path = tmp_path / "anchors.yaml"
    path.write_text("model: {name: mlp}\nlocal: {lr: &lr 0.03, lr_min: *lr}\n"
                    "dataset: {<<: {num_clients: 6, alpha: 0.5}, alpha: 0.3}\n"
                    "clients_per_round: 3\n")
    cfg = load_config(path)
    assert cfg.local.lr_min == 0.03 and cfg.dataset.alpha == 0.3 and cfg.dataset.num_clients == 6


def test_duplicate_keys_are_refused_naming_key_file_and_line(capsys, tracking, tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("rounds: 3\nmodel:\n  name: mlp\n  norm: batch\n  name: cnn\n")
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert err == (f"fedcore: error: config file {str(path)!r} line 5: duplicate key 'name' "
                   "(first on line 3)")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: s\ngrid: {seed: [0, 1]}\ngrid: {seed: [2]}\n")
    err = _refused(capsys, tmp_path, ["sweep", str(sweep)])
    assert "line 3: duplicate key 'grid' (first on line 2)" in err


@pytest.mark.parametrize("override", ["rounds=true", "local.lr=true", "seed=false",
                                      "method.aggregator.server_lr=true"])
def test_true_or_false_is_not_a_number(capsys, tracking, tmp_path, override):
    err = _refused(capsys, tmp_path, ["run", *TINY, override])
    key = override.split("=")[0]
    assert err.startswith(f"fedcore: error: {key}: expected a number, not true/false")


UNREADABLE = {
    "binary": bytes(range(128, 256)) * 3,
    "utf16": "rounds: 1\n".encode("utf-16"),
    "oversized": b"rounds: 1\n" + b"#" * limits.FILE_BYTES,
}


@pytest.mark.parametrize("kind", sorted(UNREADABLE))
def test_undecodable_or_oversized_file_is_refused(capsys, tracking, tmp_path, kind):
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(UNREADABLE[kind])
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert err.startswith(f"fedcore: error: config file {str(path)!r} is ")
    assert ("not UTF-8 text" in err) if kind != "oversized" else "at most 1,048,576" in err


def test_control_character_is_refused_in_a_file_and_an_override(capsys, tracking, tmp_path):
    path = tmp_path / "del.yaml"
    path.write_text("rounds: 1\nmodel: {name: m\x7flp}\n")
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert f"config file {str(path)!r} is not valid YAML" in err and "#x007f" in err
    err = _refused(capsys, tmp_path, ["run", *TINY, "method=fed\x7favg"])
    assert "override 'method=fed\\x7favg' is not valid YAML" in err


def test_deep_nesting_is_refused_in_a_file_and_an_override(capsys, tracking, tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("rounds: " + "[" * 20_000 + "]" * 20_000 + "\n")
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert f"config file {str(path)!r} line 1: nested deeper than {limits.DEPTH}" in err
    err = _refused(capsys, tmp_path, ["run", *TINY, "rounds=" + "[" * 400 + "]" * 400])
    assert "override 'rounds=[[[[" in err and f"nested deeper than {limits.DEPTH}" in err
    err = _refused(capsys, tmp_path, ["run", *TINY, "rounds=" + "[" * 20_000])
    assert "rounds: a string of 20,000 characters; at most 1,000 allowed" in err
    err = _refused(capsys, tmp_path, ["run", *TINY, "a." * 40 + "b=1"])
    assert err.startswith("fedcore: error: a.a.a.a.") and "nested deeper than 32" in err


@pytest.mark.parametrize(("override", "key"), [
    ("method=" + "x" * 5000, "method"),
    ("dataset.root=" + "x" * 5000, "dataset.root"),
    ("checkpoint_dir=" + "c" * 5000, "checkpoint_dir"),
    ("x" * 5000 + "=1", "override key"),
])
def test_long_strings_are_refused_naming_the_key(capsys, tracking, tmp_path, override, key):
    err = _refused(capsys, tmp_path, ["run", *TINY, "dataset.name=mnist", override])
    assert err.startswith(f"fedcore: error: {key}: a string of 5,000 characters; at most 1,000")


def test_long_path_component_and_inline_method_name_are_refused(capsys, tracking, tmp_path):
    err = _refused(capsys, tmp_path, ["run", *TINY, f"dataset.root={tmp_path}/{'r' * 300}"])
    assert err.startswith("fedcore: error: dataset.root: a path component of 300 bytes; "
                          "at most 255 allowed")
    path = tmp_path / "inline.yaml"
    path.write_text(yaml.safe_dump({"method": {"name": "m" * 10_000, "client": {
        "algorithm": "fedavg"}, "aggregator": {"rule": "fedavg"}}, "rounds": 1}))
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert err.startswith(f"fedcore: error: config file {str(path)!r}: method.name: a string of "
                          "10,000 characters")
    path.write_text(yaml.safe_dump({"method": {"name": "m" * 101, "client": {
        "algorithm": "fedavg"}, "aggregator": {"rule": "fedavg"}}, "rounds": 1}))
    err = _refused(capsys, tmp_path, ["run", str(path)])
    assert err.startswith(f"fedcore: error: method.name: String should have at most "
                          f"{limits.NAME_CHARS} characters")


def test_every_yaml_file_is_held_to_the_limits(capsys, tracking, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: s\n? {'k' * 5000}\n: 1\n")  # an unknown key, quoted in full before
    err = _refused(capsys, tmp_path, ["sweep", str(path)])
    assert err.startswith(f"fedcore: error: config file {str(path)!r}: key under the top level: "
                          "a string of 5,000 characters; at most 1,000 allowed")
