"""What a chunk's vmapped loss reads besides its batch: the shared context and frozen models.

The loss is traced once for a whole chunk of clients, so its ``LocalContext`` holds only what
the clients share; any per-client field raises when read (``PerClientField``). A plan's frozen
models are split into those every client shares (the round's global parameters: one copy, not
vmapped) and those stacked with one row per client (vmapped with the client).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from fedcore.core.engines.chunk_inputs import ChunkClient
from fedcore.core.engines.functional import FrozenParamDicts, param_dict
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.models.layout import ParamSlot
from fedcore.core.records import LocalContext


class PerClientField:
    """Stands in for a per-client field of the context a vmapped loss gets: the loss is traced
    once for the whole chunk, so it must not read one client's data, state or generator (it
    would silently get the chunk's first client's). Any use raises, naming the field."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"a vectorised loss read ctx.{self._name}, which differs per client; the engine "
            "traces one call for a chunk of clients: pass per-client values as frozen models "
            "or a gradient shift, or set vectorisable = False"
        )

    def __getattr__(self, attr: str) -> None:
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()

    __getitem__ = __contains__ = __iter__ = __len__ = __bool__ = __call__ = _refuse


PER_CLIENT = ("data", "state", "generator", "start_params")


def shared_context(ctx: LocalContext) -> LocalContext:
    """``ctx`` with its per-client fields replaced by ``PerClientField`` guards: what the
    chunk's clients share (global params, layout, schedule, round, downlink, frozen models)."""
    guards: dict[str, object] = {name: PerClientField(name) for name in PER_CLIENT}
    return replace(ctx, **guards)  # type: ignore[arg-type]


def frozen_params(
    rc: RoundContext, chunk: list[ChunkClient], slots: tuple[ParamSlot, ...]
) -> tuple[FrozenParamDicts, dict[str, torch.Tensor]]:
    """The chunk's frozen models: (shared parameter dicts, stacked m x d tensors) by name.

    A frozen model whose params are the round's global params for every client is shared
    (one copy, not vmapped); any other is stacked with one row per client.
    """
    shared: FrozenParamDicts = {}
    stacked: dict[str, torch.Tensor] = {}
    for name in chunk[0].frozen:
        rows = [c.frozen[name][0] for c in chunk]
        if all(r is rc.params for r in rows):
            shared[name] = param_dict(slots, rc.params)
        else:
            stacked[name] = torch.stack(rows).to(rc.device)
    return shared, stacked
