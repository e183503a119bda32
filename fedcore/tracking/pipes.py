"""Length-prefixed pickled messages over a pipe between fedcore and its own helper processes."""

from __future__ import annotations

import pickle
import struct
from typing import IO, Any

HEADER = struct.Struct("!Q")  # the length of the pickled message that follows
BROKEN = (OSError, ValueError, EOFError, pickle.UnpicklingError, struct.error)  # a pipe gone bad


def send(stream: IO[bytes], message: object) -> None:
    """Write one message and flush it."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def receive(stream: IO[bytes]) -> Any:
    """Read one message; ``EOFError`` when the other end closed the pipe."""
    return pickle.loads(receive_bytes(stream))  # noqa: S301  (our own process, its own pipe)


def receive_bytes(stream: IO[bytes]) -> bytes:
    """Read one message, still pickled."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError("the other process closed the pipe")
    (size,) = HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other process closed the pipe")
    return data
