"""requirements/lock.txt: the project's environment, pinned and hashed, agrees with
pyproject.toml's ranges, and is the environment the tests run in (scripts/setup.sh installs it)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fedcore.tracking import environment

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
LOCKED_EXTRAS = ("dev", "pipeline", "hub")


def locked(text: str) -> dict[str, str]:
    """``{canonical name: version}`` of a pip-compile lock (the parser runs record with)."""
    return {canonicalize_name(name): version
            for name, version in environment.PIN.findall(text)}


def declared() -> list[Requirement]:
    """The core dependencies and the locked extras of pyproject.toml, for this Python."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in LOCKED_EXTRAS:
        lines += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, lines) if r.marker is None or r.marker.evaluate()]


def disagreements(requirements: list[Requirement], pins: dict[str, str]) -> list[str]:
    """One line per declared requirement the lock leaves out or pins outside its range."""
    out = []
    for req in requirements:
        version = pins.get(canonicalize_name(req.name))
        if version is None:
            out.append(f"{req}: not in requirements/lock.txt")
        elif not req.specifier.contains(version, prereleases=True):
            out.append(f"{req}: the lock pins {version}")
    return out


def test_the_lock_pins_every_declared_dependency_within_its_range():
    problems = disagreements(declared(), locked(LOCK.read_text()))
    assert not problems, ("pyproject.toml and requirements/lock.txt disagree; run "
                          f"scripts/lock.sh and review the diff: {problems}")


def test_a_range_the_lock_does_not_meet_is_caught():
    pins = locked(LOCK.read_text())
    assert disagreements([Requirement("torch>=99")], pins) == ["torch>=99: the lock pins "
                                                               f"{pins['torch']}"]
    assert disagreements([Requirement("no-such-package>=1")], pins) == [
        "no-such-package>=1: not in requirements/lock.txt"]


def test_every_pin_carries_hashes_and_the_lock_names_its_extras():
    text = LOCK.read_text()
    header = text.split("\n\n", 1)[0]
    assert all(f"--extra={extra}" in header for extra in LOCKED_EXTRAS), header
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n\n", 1)[1])
    unhashed = [e.split()[0] for e in entries if "==" in e and "--hash=sha256:" not in e]
    assert not unhashed


def test_the_torch_builds_of_the_project_machines_are_locked():
    pins = locked(LOCK.read_text())
    wanted = locked((ROOT / "requirements" / "torch.txt").read_text())
    assert {name: pins.get(name) for name in wanted} == wanted


def test_the_tests_run_in_the_locked_environment():
    pins = locked(LOCK.read_text())
    installed: dict[str, str] = {}  # the first on the path, as imports see it
    for dist in metadata.distributions(path=environment.site_folders()):
        installed.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    off = {name: (version, installed.get(name)) for name, version in pins.items()
           if installed.get(name) != version and name not in {"pip", "setuptools"}}
    assert not off, f"installed differs from the lock (run scripts/setup.sh): {off}"
