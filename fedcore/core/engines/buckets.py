"""Step-count buckets of the vectorised engine, and the client-sample passes each scheme executes.

A chunk's clients are sorted longest first (most local steps). Clients with the same step
count form a bucket; the buckets run together in lock-step, and a bucket leaves the vmapped
batch after its last step, so step ``t`` trains the first ``k_t`` clients (those with more than
``t`` steps). ``segments`` cuts a chunk's steps into runs of constant ``k`` (one per bucket),
which the engine executes with fixed shapes.

Counted in client-sample passes (one sample through one forward and backward pass): a client's
*useful* passes are its real batch rows; the engine *executes* ``k_t x width`` at step ``t``
(``width``: the chunk's widest batch; a ragged last batch is padded to it and masked).
A plain lock-step ``vmap`` would execute every client for the longest client's steps
(``lockstep_passes``). Nothing here needs torch: the counting script of
``benchmarks/padding.py`` uses it without training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Segment:
    """Steps ``start .. stop - 1`` of a chunk train its first ``clients`` clients."""

    start: int
    stop: int
    clients: int


@dataclass(frozen=True)
class Passes:
    """Client-sample passes: the real batch rows (``useful``) and the rows run (``executed``)."""

    useful: int = 0
    executed: int = 0

    def __add__(self, other: Passes) -> Passes:
        return Passes(self.useful + other.useful, self.executed + other.executed)

    @property
    def efficiency(self) -> float:
        """useful / executed; 1.0 when nothing ran."""
        return self.useful / self.executed if self.executed else 1.0


def segments(counts: Sequence[int]) -> list[Segment]:
    """A chunk's steps as runs of a constant number of clients, from its clients' step
    counts (longest first); a bucket with no steps trains nothing."""
    if list(counts) != sorted(counts, reverse=True):
        raise ValueError("vectorised chunk: clients must come longest first (step count)")
    out: list[Segment] = []
    start = 0
    for stop in sorted({c for c in counts if c > 0}):
        out.append(Segment(start, stop, sum(c >= stop for c in counts)))
        start = stop
    return out


def longest_first(counts: Sequence[int]) -> list[int]:
    """Client positions by step count, longest first (ties keep their order)."""
    return sorted(range(len(counts)), key=lambda i: -counts[i])


def chunk_order(counts: Sequence[int], size: int) -> list[list[int]]:
    """Client positions longest first, cut into chunks of at most ``size``."""
    if size < 1:
        raise ValueError(f"chunk size {size}; allowed: >= 1")
    order = longest_first(counts)
    return [order[lo : lo + size] for lo in range(0, len(order), size)]


def _width(rows: Sequence[Sequence[int]], width: int | None) -> int:
    """The given width, else the widest batch of ``rows`` (the engine's chunk width)."""
    return width if width is not None else max((max(r, default=0) for r in rows), default=0)


def bucketed_passes(rows: Sequence[Sequence[int]], width: int | None = None) -> Passes:
    """The passes of one chunk, its clients longest first: ``rows[i][t]`` real rows of client
    ``i`` at step ``t``, every executed step ``width`` rows wide (None: the widest batch)."""
    wide = _width(rows, width)
    counts = [len(r) for r in rows]
    executed = sum((s.stop - s.start) * s.clients * wide for s in segments(counts))
    return Passes(sum(sum(r) for r in rows), executed)


def lockstep_passes(rows: Sequence[Sequence[int]], width: int | None = None) -> Passes:
    """The passes of a plain lock-step ``vmap`` over the clients: every client runs the
    longest client's number of steps, each ``width`` rows wide (None: the widest batch)."""
    longest = max((len(r) for r in rows), default=0)
    return Passes(sum(sum(r) for r in rows), len(rows) * longest * _width(rows, width))


def round_passes(
    rows: Sequence[Sequence[int]], chunk: int | None = None
) -> tuple[Passes, Passes]:
    """(lock-step, bucketed) passes of a round's clients, in any order: lock-step over all of
    them, bucketed in chunks of ``chunk`` (None: one chunk) longest first, each chunk as wide
    as its widest batch."""
    size = chunk or max(1, len(rows))
    bucketed = Passes()
    for members in chunk_order([len(r) for r in rows], size):
        bucketed += bucketed_passes([rows[i] for i in members])
    return lockstep_passes(rows), bucketed


def planned_rows(n: int, batch_size: int, epochs: int, steps: int | None = None) -> list[int]:
    """Real rows of each local step of a client with ``n`` samples, as its plan draws them
    (``fedcore.core.clients.base``): batches of ``batch_size`` (at most ``n``), ``epochs``
    shuffled passes with a ragged last batch each, or ``steps`` full batches when set."""
    bs = min(batch_size, n)
    if bs <= 0:
        return []
    one = [min(bs, n - lo) for lo in range(0, n, bs)]
    if steps is None:
        return one * epochs
    full = [r for r in one if r == bs] or one
    return (full * -(-steps // len(full)))[:steps]


def mean_steps(sizes: Sequence[int], batch_size: int, epochs: int, steps: int | None) -> float:
    """The mean number of local steps of clients of ``sizes`` samples (0 for no client)."""
    counts = [len(planned_rows(n, batch_size, epochs, steps)) for n in sizes]
    return sum(counts) / len(counts) if counts else 0.0
