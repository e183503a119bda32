"""The Python environment behind a run: the lock's digest, the installed distributions' digest,
and whether they agree (docs/how-to/install.md)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sysconfig
from pathlib import Path

LOCK_DIGEST_TAG = "fedcore.lock_digest"
ENV_DIGEST_TAG = "fedcore.env_digest"
MATCHES_TAG = "fedcore.env_matches_lock"
OWN_DISTRIBUTION = "fedcore-fl"  # its code is in the code digest, its version in fedcore.version
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", re.M)


def _name(raw: str) -> str:
    return re.sub(r"[-_.]+", "-", raw).lower()  # PEP 503's normalised name


def site_folders() -> list[str]:
    """The folders distributions are installed into (this environment's site-packages), not
    whatever else is on ``sys.path``: setuptools puts its vendored copies there once imported,
    which would make the digest depend on what a process imported first."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def installed() -> dict[str, str]:
    """``{normalised name: version}`` of every distribution installed in this environment,
    read from the ``NAME-VERSION.dist-info`` folder names (reading each METADATA costs about a
    second)."""
    found: dict[str, str] = {}
    for entry in site_folders():
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for folder in names:
            if folder.endswith(".dist-info") and "-" in folder:
                name, version = folder[: -len(".dist-info")].split("-", 1)
                found.setdefault(_name(name), version)
    found.pop(OWN_DISTRIBUTION, None)
    return found


def digest(pins: dict[str, str]) -> str:
    """A short digest of ``name==version`` pins, whatever their order."""
    text = "\n".join(f"{k}=={v}" for k, v in sorted(pins.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def locked(lock: Path) -> dict[str, str]:
    """``{normalised name: version}`` of a pip-compile lock file."""
    return {_name(n): v for n, v in PIN.findall(lock.read_text(encoding="utf-8"))}


@functools.lru_cache(maxsize=1)
def environment_tags(lock: Path) -> dict[str, str]:
    """The lock file's digest (``none`` outside a checkout), the installed distributions'
    digest, and ``true`` when every locked pin is installed at its version."""
    present = installed()
    if not lock.is_file():
        return {LOCK_DIGEST_TAG: "none", ENV_DIGEST_TAG: digest(present), MATCHES_TAG: "no lock"}
    pins = locked(lock)
    matches = all(present.get(name) == version for name, version in pins.items())
    return {
        LOCK_DIGEST_TAG: hashlib.sha256(lock.read_bytes()).hexdigest()[:12],
        ENV_DIGEST_TAG: digest(present),
        MATCHES_TAG: str(matches).lower(),
    }
