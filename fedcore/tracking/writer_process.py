"""``fedcore run``'s MLflow store in a writer process: the training process never imports MLflow.

In a fresh process MLflow costs about 1.5 s of CPU to import and 1 s more to open its SQLAlchemy
store, more than a short run trains. ``fedcore run`` starts the writer (:func:`start`) first
thing; it imports MLflow on another core while the command imports torch, reads the config and
builds the data. Once they proved valid the command tells it to open the store
(:meth:`Writer.go`: bad input writes nothing; a new SQLite store gets its schema without an
fsync per statement, :func:`fedcore.tracking.store_setup.fast_schema`), and from then on every
write and query of the run is one call of :class:`~fedcore.tracking.run_store.MlflowRunStore`
in the writer, sent over a pipe with plain arguments and answered before the command goes on
(the tracker makes its writes from its writer threads, so training does not wait for them).
While the run trains the writer also imports what the run's end needs (torch and MLflow's
PyTorch flavour for the model).

An error in the writer is raised in the command with its type and message (a full disk stays a
full disk: :func:`fedcore.faults.is_disk_full`); a writer that dies fails the run's next write
with :class:`WriterGone`. The writer ignores Ctrl-C and lives in its own session: a stop is the
command's to record. It exits when the command closes the pipe (at exit, or when the command
dies: a killed command's run stays RUNNING, and rerunning resumes it).

``FEDCORE_WRITER_PROCESS=0`` keeps the store in the command's process.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from typing import IO, Any, cast

from fedcore.tracking.pipes import BROKEN, receive, receive_bytes, send
from fedcore.tracking.run_store import MlflowRunStore
from fedcore.tracking.settings import TrackingSettings

WRITER_ENV = "FEDCORE_WRITER_PROCESS"


class WriterGone(RuntimeError):
    """The writer process died or closed its pipe."""


class WriterError(RuntimeError):
    """An error raised by a store call in the writer process (its type and message)."""


class Writer:
    """The writer process; :meth:`go` opens the store and returns it, :meth:`close` ends it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.told = False
        self._lock = threading.Lock()  # one call at a time on the pipe

    def go(self, settings: TrackingSettings) -> MlflowRunStore:
        """Open ``settings``' store in the writer now; the store whose calls it runs."""
        self.told = True
        self._send(("go", settings))
        return cast(MlflowRunStore, _RemoteStore(self))  # the same methods, run in the writer

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``MlflowRunStore.<name>(*args, **kwargs)`` in the writer; its result or its error."""
        with self._lock:
            self._send((name, args, kwargs))
            try:
                assert self.proc.stdout is not None
                ok, value = receive(self.proc.stdout)
            except BROKEN as exc:
                raise WriterGone(self._gone()) from exc
        if ok:
            return value
        raise value

    def close(self) -> None:
        """End the writer: at once when never told to go (it wrote nothing), else by closing
        its pipe once the calls made are answered; then reap it."""
        if not self.told and self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, message: object) -> None:
        try:
            assert self.proc.stdin is not None
            send(self.proc.stdin, message)
        except BROKEN as exc:
            raise WriterGone(self._gone()) from exc

    def _gone(self) -> str:
        code = self.proc.poll()
        how = "is not answering" if code is None else f"exited with code {code}"
        return (f"the MLflow writer process {how}; the run's records up to here are in the "
                f"store (set {WRITER_ENV}=0 to write from the run's own process)")


class _RemoteStore:
    """Any ``MlflowRunStore`` method, called in the writer."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not callable(getattr(MlflowRunStore, name, None)):
            raise AttributeError(f"the writer's store has no call {name!r}")

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._writer.call(name, args, kwargs)

        return call


def start() -> Writer | None:
    """A writer process importing MLflow from now on (None: turned off or not startable)."""
    if os.environ.get(WRITER_ENV, "1") == "0":
        return None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedcore.tracking.writer_process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
        )
    except OSError:
        return None
    writer = Writer(proc)
    atexit.register(writer.close)
    return writer


def _portable(exc: BaseException) -> BaseException:
    """``exc`` as the command can unpickle it, whatever library raised it: an ``OSError`` keeps
    its errno (a full disk), anything else becomes a :class:`WriterError` naming its type, with
    the messages of the exceptions it was raised from (where a full disk's text may be)."""
    if isinstance(exc, OSError):
        return OSError(exc.errno, str(exc))
    chain, link, seen = [], exc.__cause__ or exc.__context__, {id(exc)}
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(f"{type(link).__name__}: {link}")
        link = link.__cause__ or link.__context__
    text = f"{type(exc).__name__}: {exc}" + "".join(f" (from {c})" for c in chain)
    return WriterError(text)


_PRELOADED = threading.Event()


def _preload() -> None:
    """What the run's end needs, imported while the run trains."""
    try:
        import mlflow.pytorch  # noqa: F401
        from mlflow.models import infer_signature  # noqa: F401

        import fedcore.frames  # noqa: F401
        import fedcore.tracking.models  # noqa: F401
    finally:
        _PRELOADED.set()


def _serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Wait for ``go``, open the store, then answer calls until the pipe closes."""
    from fedcore.tracking.store_setup import fast_schema

    go, settings = receive(stdin)
    assert go == "go"
    store = MlflowRunStore(settings)
    try:
        with fast_schema(settings.tracking_uri):
            store.open()
    except Exception:  # noqa: BLE001, S110  (the first call meets the same error and reports it)
        pass
    threading.Thread(target=_preload, daemon=True, name="fedcore-preload").start()
    while True:
        message = receive_bytes(stdin)
        if b"torch" in message:  # unpickling it imports torch: not while the preload does
            _PRELOADED.wait()  # (torch's import is not safe from two threads at once)
        name, args, kwargs = pickle.loads(message)  # noqa: S301  (the command, over its pipe)
        try:
            reply = (True, getattr(store, name)(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001  (raised in the command)
            reply = (False, _portable(exc))
        send(stdout, reply)


def _main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a stop is the command's to record
    from fedcore.pipeline.env import configure_environment

    configure_environment()
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401  (the slow imports)
    from mlflow.tracking import MlflowClient  # noqa: F401

    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating tables"
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing a library prints may corrupt the pipe
    try:
        _serve(sys.stdin.buffer, stdout)
    except EOFError:  # the command closed the pipe: every call it made was answered
        pass
    sys.stderr.flush()
    os._exit(0)  # skip tearing down MLflow, SQLAlchemy and torch (the store is committed)


if __name__ == "__main__":  # run from the module's own name, so that its errors unpickle
    from fedcore.tracking.writer_process import _main as main

    main()
