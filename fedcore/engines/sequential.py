"""The sequential engine: each sampled client trains on its own, one after the other."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

import torch
from torch import nn

from fedcore.clients import ClientAlgorithm, ClientUpdate, LocalContext
from fedcore.round_context import RoundContext
from fedcore.seeding import GLOBAL_RNG_LOCK, derive_seed

NAME = "sequential"


def client_seed(rc: RoundContext, client_id: int) -> int:
    """The seed of a client's batches, dropout and attack noise in one round."""
    return derive_seed(rc.cfg.seed, "client", rc.round, client_id)


def local_context(rc: RoundContext, client_id: int) -> LocalContext:
    """What client ``client_id`` sees in the round: data, state, generator, start, downlink."""
    ctx = LocalContext(
        model=rc.model,
        global_params=rc.params,
        global_buffers=rc.buffers,
        layout=rc.layout,
        data=rc.data.clients[client_id],
        schedule=rc.schedule,
        state=rc.store[client_id],
        generator=torch.Generator().manual_seed(client_seed(rc, client_id)),
        round=rc.round,
        needs=rc.aggregator.needs,
        server_payload=rc.downlink,
        seed=rc.cfg.seed,
    )
    steps = planned_steps(rc.client_algo, ctx) if rc.needs_num_steps else None
    ctx.start_params = rc.start_point(client_id, steps)
    return ctx


def planned_steps(algo: ClientAlgorithm, ctx: LocalContext) -> int:
    """The number of local steps ``algo`` will take in ``ctx``: its batches, drawn from a copy
    of the client's generator (the real draws are left untouched)."""
    gen = torch.Generator().set_state(ctx.generator.get_state())
    return sum(1 for _ in algo.batches(replace(ctx, generator=gen)))


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
    ctx = local_context(rc, client_id)
    with global_rng_guard(rc.model), torch.random.fork_rng(devices=rng_devices(rc)):
        seed_global_rng(rc, client_seed(rc, client_id))
        return rc.client_algo.local_update(ctx)


def train_round(
    rc: RoundContext, sampled: list[int], order: list[int] | None = None
) -> dict[int, ClientUpdate]:
    """Every sampled client's update, trained in ``order`` (default: ``sampled``)."""
    train_order = order if order is not None else sampled
    return {int(cid): train_client(rc, int(cid)) for cid in train_order}
