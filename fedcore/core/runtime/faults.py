"""A full disk, told in one line: find it in an exception chain, and name what was written.

Libraries report a full disk in their own words (SQLite: ``database or disk is full``; torch's
writer: ``unexpected pos 6208 vs 6102``, with the ``OSError`` only as its context); fedcore
turns each into ``no space left on device writing <what> <path>`` (docs/explanation/reliability.md).
"""

from __future__ import annotations

import errno
import logging

FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from or during says the disk is full."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OSError) and link.errno in FULL_ERRNOS:
            return True
        if any(text in str(link).lower() for text in FULL_TEXTS):
            return True
        link = link.__cause__ or link.__context__
    return False


def no_space(what: str) -> OSError:
    """The error for a full disk while writing ``what`` (e.g. ``checkpoint /x/round-1.pt``)."""
    return OSError(errno.ENOSPC, f"no space left on device writing {what}")


class DropDiskFull(logging.Filter):
    """Drops a library's log record of a full disk (MLflow logs each SQLite error with its
    traceback before raising it); fedcore reports the cause once, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_disk_full(exc):
            return False
        return not any(text in record.getMessage().lower() for text in FULL_TEXTS)


def quiet_library_logs(*names: str) -> None:
    """Install ``DropDiskFull`` on the loggers ``names`` (once each)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropDiskFull) for f in logger.filters):
            logger.addFilter(DropDiskFull())
