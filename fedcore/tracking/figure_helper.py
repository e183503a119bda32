"""A run's two figures drawn by a helper process that imported matplotlib while the run trained
(and a report's largest figure, drawn there while the report draws the others).

A fresh process pays about 0.7 s of CPU to import matplotlib and 0.3 s more to draw its first
figures (fonts), at the run's end, after the last round: on a short run that is a large part of
what tracking adds. ``start`` launches a helper process that imports matplotlib at once, in
parallel with the run (on another core), and then draws what it is sent with the same functions
(``fedcore.figures.plots.curves_png`` and ``fairness_png``), so the files are the same, byte
for byte. The run's end asks ``draw`` and writes its other records meanwhile; whenever the
helper cannot answer (it could not be started, it died, it reported an error) the figures are
drawn in this process instead.

One helper per process, started on first use and reused by every run; it exits when this
process closes its end of the pipe (at exit, or when this process dies), and ignores Ctrl-C
(the terminal's SIGINT reaches the whole process group; the run decides what a stop means).
``FEDCORE_FIGURE_HELPER=0`` turns it off.
"""

from __future__ import annotations

import atexit
import importlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import numpy as np

HELPER_ENV = "FEDCORE_FIGURE_HELPER"
FIGURES = "fedcore.figures."  # draw_figure's functions come from this package
_HEADER = struct.Struct("!Q")  # the length of the pickled message that follows


class _Helper:
    """The helper process and the lock that keeps one request at a time on its pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lock = threading.Lock()

    def request(self, message: dict[str, Any]) -> bool:
        """Send one drawing request; whether the helper drew it."""
        with self.lock:
            try:
                assert self.proc.stdin is not None and self.proc.stdout is not None
                _send(self.proc.stdin, message)
                return bool(_receive(self.proc.stdout))
            except (OSError, ValueError, EOFError, pickle.UnpicklingError, struct.error):
                return False

    def close(self) -> None:
        """Close the pipe (the helper exits on its end) and reap it."""
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_HELPER: _Helper | None = None
_STARTED = False  # a start was tried (one try per process)
_LOCK = threading.Lock()


def start() -> None:
    """Launch this process's helper (once; no-op when it runs, was tried, or is turned off)."""
    global _HELPER, _STARTED
    with _LOCK:
        if _STARTED or os.environ.get(HELPER_ENV, "1") == "0":
            return
        _STARTED = True
        _HELPER = launch()


def launch() -> _Helper | None:
    """A new helper process (None when none can be started); closed at this process's exit."""
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedcore.tracking.figure_helper"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    helper = _Helper(proc)
    atexit.register(helper.close)
    return helper


class Drawing:
    """Figures being drawn by the helper; ``wait`` returns once both files are written."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message
        self.drawn = False
        self._thread: threading.Thread | None = None
        helper = _HELPER
        if helper is not None:
            self._thread = threading.Thread(target=self._ask, args=(helper,), daemon=True,
                                            name="fedcore-figures")
            self._thread.start()

    def _ask(self, helper: _Helper) -> None:
        self.drawn = helper.request(self.message)

    def join(self) -> None:
        """Wait until the helper is done (drawn or failed)."""
        if self._thread is not None:
            self._thread.join()

    def wait(self) -> None:
        """Wait for the helper; draw here what it did not."""
        self.join()
        if not self.drawn:
            _draw(self.message)


def draw(history: list[dict[str, float]], accuracy: np.ndarray, round: int,
         out: Path) -> Drawing:
    """Start writing ``curves.png`` and ``fairness.png`` of a run into folder ``out``, by the
    helper while the caller goes on; ``Drawing.wait`` before reading them."""
    start()
    return Drawing({"history": history, "accuracy": np.asarray(accuracy), "round": round,
                    "out": str(out)})


def draw_figure(function: str, *args: Any) -> Drawing:
    """Start ``function(*args)`` (``module.name`` of a function in ``fedcore.figures`` that
    writes a figure file) in the helper while the caller goes on; ``Drawing.wait`` draws it
    here if the helper did not."""
    if not function.startswith(FIGURES):
        raise ValueError(f"draw_figure: {function!r} is not a function of {FIGURES}")
    start()
    return Drawing({"function": function, "args": args})


def _draw(message: dict[str, Any]) -> None:
    from fedcore.figures.plots import curves_png, fairness_png

    if "function" in message:  # draw_figure's request
        module, name = message["function"].rsplit(".", 1)
        getattr(importlib.import_module(module), name)(*message["args"])
        return
    out = Path(message["out"])
    curves_png(message["history"], out / "curves.png")
    fairness_png(message["accuracy"], message["round"], out / "fairness.png")


def _send(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the figure helper closed its pipe")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the figure helper closed its pipe")
    return pickle.loads(data)  # noqa: S301  (our own child process, over its own pipe)


def _helper_main() -> int:
    """The helper: import matplotlib and draw once (fonts), then draw each request until the
    pipe closes, answering True (drawn) or False (failed: the caller draws)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import io

    from fedcore.figures.plots import _figure

    _figure((1, 1)).savefig(io.BytesIO(), format="png")  # loads the font and the Agg canvas
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            message = _receive(stdin)
        except EOFError:
            return 0
        try:
            _draw(message)
            ok = True
        except Exception:  # noqa: BLE001  (the caller draws them itself, and reports errors)
            ok = False
        _send(stdout, ok)


if __name__ == "__main__":
    sys.exit(_helper_main())
