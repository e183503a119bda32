"""The sequential engine: each sampled client trains on its own, one after the other, with
autograd (the shared template of ``fedcore.core.clients.template``, via ``local_update``)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from fedcore.core.clients import ClientUpdate
from fedcore.core.clients.template import client_seed, local_context
from fedcore.core.config.seeding import GLOBAL_RNG_LOCK
from fedcore.core.engines.round_context import RoundContext

NAME = "sequential"
__all__ = ["NAME", "client_seed", "global_rng_guard", "local_context", "rng_devices",
           "seed_global_rng", "train_client", "train_round"]


def rng_devices(rc: RoundContext) -> list[torch.device]:
    return [rc.device] if rc.device.type == "cuda" else []


def seed_global_rng(rc: RoundContext, seed: int) -> None:
    """Seed the generators a client's dropout draws from, as ``torch.manual_seed`` does.

    On CPU only the default generator is seeded (``torch.manual_seed`` also queues seeding of
    every accelerator backend, about 0.6 ms a call); the state, and so every draw, is the same.
    """
    torch.default_generator.manual_seed(seed)
    if rc.device.type == "cuda":
        torch.cuda.manual_seed_all(seed)


def global_rng_guard(model: nn.Module) -> AbstractContextManager[object]:
    """The process-wide RNG lock when training draws from torch's global RNG (dropout), so
    simulations in parallel threads stay bit-identical; no lock otherwise."""
    stochastic = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())
    return GLOBAL_RNG_LOCK if stochastic else nullcontext()


def train_client(rc: RoundContext, client_id: int) -> ClientUpdate:
    """One client's local training in the round (seeded by (seed, round, client))."""
    ctx = local_context(rc, client_id, rc.client_algo)
    with global_rng_guard(rc.model), torch.random.fork_rng(devices=rng_devices(rc)):
        seed_global_rng(rc, client_seed(rc, client_id))
        return rc.client_algo.local_update(ctx)


def train_round(
    rc: RoundContext, sampled: list[int], order: list[int] | None = None
) -> dict[int, ClientUpdate]:
    """Every sampled client's update, trained in ``order`` (default: ``sampled``)."""
    train_order = order if order is not None else sampled
    return {int(cid): train_client(rc, int(cid)) for cid in train_order}
