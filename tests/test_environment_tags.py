"""fedcore.tracking.environment: the lock's digest, the installed distributions' digest, and
whether the environment is the lock's, as recorded on every run."""

from __future__ import annotations

import hashlib
import re
from importlib import metadata
from pathlib import Path

from fedcore.tracking import environment

ROOT = Path(__file__).resolve().parents[1]


def test_installed_reads_what_importlib_metadata_reads_in_site_packages():
    expected: dict[str, str] = {}
    for dist in metadata.distributions(path=environment.site_folders()):
        expected.setdefault(re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(), dist.version)
    expected.pop("fedcore-fl", None)
    assert environment.installed() == expected


def test_what_a_process_imported_first_does_not_move_the_digest(monkeypatch, tmp_path):
    vendored = tmp_path / "_vendor"
    (vendored / "zipp-0.1.dist-info").mkdir(parents=True)  # as setuptools' vendored copies
    before = environment.installed()
    monkeypatch.syspath_prepend(str(vendored))
    assert environment.installed() == before


def _lock(tmp_path: Path, pins: dict[str, str]) -> Path:
    lock = tmp_path / "lock.txt"
    lock.write_text("#\n# a lock\n#\n\n" + "".join(
        f"{name}=={version} \\\n    --hash=sha256:{'0' * 64}\n" for name, version in pins.items()))
    return lock


def test_a_lock_the_environment_meets_and_one_it_does_not(tmp_path):
    present = environment.installed()
    some = dict(sorted(present.items())[:5])
    environment.environment_tags.cache_clear()
    lock = _lock(tmp_path, some)
    tags = environment.environment_tags(lock)
    assert tags == {
        "fedcore.lock_digest": hashlib.sha256(lock.read_bytes()).hexdigest()[:12],
        "fedcore.env_digest": environment.digest(present),
        "fedcore.env_matches_lock": "true",
    }
    environment.environment_tags.cache_clear()
    name = next(iter(some))
    (tmp_path / "moved").mkdir()
    other = _lock(tmp_path / "moved", {**some, name: some[name] + ".post999"})
    assert environment.environment_tags(other)["fedcore.env_matches_lock"] == "false"
    environment.environment_tags.cache_clear()
    assert environment.environment_tags(tmp_path / "none.txt")["fedcore.env_matches_lock"] == (
        "no lock")
    environment.environment_tags.cache_clear()


def test_the_env_digest_moves_with_any_version():
    pins = {"a": "1.0", "b": "2.0"}
    assert environment.digest(pins) == environment.digest(dict(reversed(pins.items())))
    assert environment.digest(pins) != environment.digest({**pins, "b": "2.0.1"})


def test_this_environment_is_the_projects_lock():
    environment.environment_tags.cache_clear()
    tags = environment.environment_tags(ROOT / "requirements" / "lock.txt")
    assert tags["fedcore.env_matches_lock"] == "true", "run scripts/setup.sh"
