"""A chunk's clients and their padded inputs for the vectorised engine.

Each client's batches are its plan's; a chunk pads them to its widest batch (tuplet-aligned for
tuplet losses) and masks the padded rows. Dropout noise is drawn up front from each client's own
seeded RNG stream, in the order the sequential engine's forward passes draw it (after the draws
of an earlier pass of the same client, ``drawn_before``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from fedcore.core.clients.template import Pass, Prepared, client_seed
from fedcore.core.component.seeding import GLOBAL_RNG_LOCK
from fedcore.core.engines.functional import DropoutCall
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.engines.sequential import rng_devices, seed_global_rng
from fedcore.core.models.layout import to_device
from fedcore.core.records import LocalContext


@dataclass
class ChunkClient:
    """One client's pass in a chunk: the prepared client, the pass (its plan's main pass or
    follow-up) and the batches whose dropout draws come first (the main pass's, before a
    follow-up's)."""

    prep: Prepared
    run: Pass
    drawn_before: list[torch.Tensor] = field(default_factory=list)

    @property
    def ctx(self) -> LocalContext:
        return self.prep.ctx

    @property
    def batches(self) -> list[torch.Tensor]:
        return self.run.batches

    @property
    def frozen(self) -> dict[str, tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        return self.run.frozen or {}

    @property
    def group(self) -> tuple[int, tuple[str, ...]]:
        """Clients of one chunk share the tuplet size and the frozen models' names."""
        return self.run.arity, tuple(sorted(self.frozen))


class ChunkInputs(NamedTuple):
    """A chunk's inputs on the device: its clients' data concatenated (``x``, ``y``), the
    per-step row index into them (``step_index``, steps x m x width), the image and tuplet
    masks, and the dropout noise (one steps x m x width x shape tensor per dropout call)."""

    x: torch.Tensor
    y: torch.Tensor
    step_index: torch.Tensor
    image_mask: torch.Tensor
    tuplet_mask: torch.Tensor
    noise: list[torch.Tensor]


def chunk_inputs(
    rc: RoundContext, chunk: list[ChunkClient], arity: int, dropouts: list[DropoutCall]
) -> ChunkInputs:
    """Padded per-step index, masks and dropout noise of a chunk, on the device."""
    device, m = rc.device, len(chunk)
    steps = max(len(c.batches) for c in chunk)
    if arity:
        tuplets = max((len(b) // arity for c in chunk for b in c.batches), default=1)
        width = arity * tuplets
    else:
        tuplets, width = 1, max((len(b) for c in chunk for b in c.batches), default=1)
    sizes = [c.ctx.data.num_train for c in chunk]
    offsets = torch.tensor([0, *sizes[:-1]]).cumsum(0).tolist()
    index = torch.zeros(steps, m, width, dtype=torch.long)
    image_mask = torch.zeros(steps, m, width)
    tuplet_mask = torch.zeros(steps, m, tuplets)
    rows_of: list[list[torch.Tensor]] = []
    for i, c in enumerate(chunk):
        rows_i = []
        for t, idx in enumerate(c.batches):
            if arity:
                b = len(idx) // arity
                rows = (torch.arange(arity)[:, None] * tuplets + torch.arange(b)).reshape(-1)
                tuplet_mask[t, i, :b] = 1.0
            else:
                rows = torch.arange(len(idx))
            index[t, i, rows] = idx + offsets[i]
            image_mask[t, i, rows] = 1.0
            rows_i.append(rows)
        rows_of.append(rows_i)
    noise = dropout_noise(rc, chunk, rows_of, (steps, m, width), dropouts)
    x = torch.cat([c.ctx.data.x_train for c in chunk])
    y = torch.cat([c.ctx.data.y_train for c in chunk])
    return ChunkInputs(x, y, to_device(index, device), to_device(image_mask, device),
                       to_device(tuplet_mask, device), noise)


def dropout_noise(
    rc: RoundContext,
    chunk: list[ChunkClient],
    rows_of: list[list[torch.Tensor]],
    size: tuple[int, int, int],
    dropouts: list[DropoutCall],
) -> list[torch.Tensor]:
    """Each dropout call's noise (``size`` x its per-sample shape; zeros on padded rows): every
    client's draws replayed from its seed, after the draws of its ``drawn_before`` batches."""
    device = rc.device
    noise = [torch.zeros(*size, *d.shape, device=device) for d in dropouts]
    if not dropouts:
        return noise
    for i, c in enumerate(chunk):
        seed = client_seed(rc, c.ctx.data.client_id)
        with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=rng_devices(rc)):
            seed_global_rng(rc, seed)
            for idx in c.drawn_before:  # the draws an earlier phase made
                for d in dropouts:
                    F.dropout(torch.ones(len(idx), *d.shape, device=device), d.p, True)
            for t, rows in enumerate(rows_of[i]):
                rows = rows.to(device)
                for k, d in enumerate(dropouts):
                    ones = torch.ones(len(rows), *d.shape, device=device)
                    noise[k][t, i, rows] = F.dropout(ones, d.p, training=True)
    return noise
