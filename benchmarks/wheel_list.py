"""The device wheel list (scripts/device_wheels.txt) and a wheel folder checked against it.

    python3 benchmarks/wheel_list.py verify          # the list: name==version lines, no repeats
    python3 benchmarks/wheel_list.py check .whl      # the folder: exactly the listed wheels

Standard library only: it runs under the GPU machine's bare ``python3`` before anything is
installed. Exit 1 with one line naming the problem.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LIST = Path(__file__).resolve().parents[1] / "scripts" / "device_wheels.txt"
LIMIT_BYTES = 56 << 20  # the device call carries 64 MiB in all: the repository needs the rest
LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)$")


def normalise(name: str) -> str:
    """A distribution name as pip compares them (PEP 503), e.g. ``typing_extensions`` ->
    ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_list(path: Path = LIST) -> dict[str, str]:
    """{normalised name: version} of the list; ValueError naming a bad or repeated line."""
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        if match is None:
            raise ValueError(f"{path.name}:{n}: {line!r} is not NAME==VERSION")
        name = normalise(match.group(1))
        if name in out:
            raise ValueError(f"{path.name}:{n}: {name} listed twice")
        out[name] = match.group(2)
    if not out:
        raise ValueError(f"{path.name}: no packages listed")
    return out


def check_folder(folder: Path, listed: dict[str, str]) -> int:
    """Total bytes of ``folder``'s wheels; ValueError unless they are exactly ``listed``."""
    found: dict[str, str] = {}
    total = 0
    for wheel in sorted(folder.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        key = normalise(name)
        if key in found:
            raise ValueError(f"{folder}: two wheels of {key} (pip would refuse to install both)")
        found[key] = version
        total += wheel.stat().st_size
    extra = sorted(set(found) - set(listed))
    missing = sorted(set(listed) - set(found))
    wrong = sorted(f"{k} {found[k]} (listed {v})" for k, v in listed.items()
                   if k in found and found[k] != v)
    for what, items in (("not listed", extra), ("missing", missing), ("other version", wrong)):
        if items:
            raise ValueError(f"{folder}: wheels {what}: {', '.join(items)}")
    if total > LIMIT_BYTES:
        raise ValueError(f"{folder}: {total / 2**20:.1f} MiB of wheels, over the "
                         f"{LIMIT_BYTES >> 20} MiB that fit beside the repository in a device call")
    return total


def main(argv: list[str]) -> int:
    try:
        listed = read_list()
        if argv[:1] == ["verify"] and len(argv) == 1:
            print(f"wheel list: {len(listed)} packages ({LIST.name})")
        elif argv[:1] == ["check"] and len(argv) == 2:
            total = check_folder(Path(argv[1]), listed)
            print(f"wheels: the {len(listed)} listed packages, {total / 2**20:.1f} MiB")
        else:
            print("usage: wheel_list.py verify | check FOLDER", file=sys.stderr)
            return 2
    except ValueError as exc:
        print(f"wheel_list: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
