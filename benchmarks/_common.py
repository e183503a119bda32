"""Shared helpers for benchmarks: timing and the real MNIST digits repacked for torchvision."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fedcore.core.data.idx import repack_mnist_t10k

ROOT = Path(__file__).resolve().parents[1]


def shared_mnist_root() -> Path | None:
    """A temporary torchvision root holding the shared MNIST t10k digits (8,000 / 2,000)."""
    for shared in (ROOT.parent / "shared", ROOT / "shared", Path("/work/shared")):
        src = shared / "data" / "mnist-t10k"
        if (src / "t10k-images-idx3-ubyte.gz").is_file():
            return repack_mnist_t10k(src, temporary_folder("fedcore-mnist-"))
    return None


def temporary_folder(prefix: str) -> Path:
    """A new folder under the system's temp dir, removed when this process exits."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def best_of(fn: Callable[[], object], repeats: int = 3) -> float:
    """Minimum wall time of ``repeats`` calls (the least noisy estimate)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def print_table(rows: list[dict], columns: list[str]) -> None:
    def fmt(v):
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    cells = [[fmt(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    print(" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("-|-".join("-" * w for w in widths))
    for row in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def print_figures(figures: dict[str, object], width: int, out: Path | None) -> None:
    """A benchmark's figures, one ``name value`` line each (floats to 4 digits), and as JSON
    into ``out`` when given."""
    import json

    for key, value in figures.items():
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"{key:{width}s} {text}")
    if out:
        out.write_text(json.dumps(figures, indent=1))

