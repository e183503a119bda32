"""The sequential engine: each sampled client trains on its own, one after the other."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from fedcore.adversaries import attack_update
from fedcore.clients import ClientUpdate, LocalContext
from fedcore.seeding import GLOBAL_RNG_LOCK, derive_seed

NAME = "sequential"


def client_seed(sim: Any, client_id: int, round: int) -> int:
    """The seed of a client's batches, dropout and attack noise in one round."""
    return derive_seed(sim.cfg.seed, "client", round, client_id)


def local_context(sim: Any, client_id: int, round: int) -> LocalContext:
    """What client ``client_id`` sees in ``round``: its data, state, generator and start point."""
    ctx = LocalContext(
        model=sim.model,
        global_params=sim.params,
        global_buffers=sim.buffers,
        layout=sim.layout,
        data=sim.data.clients[client_id],
        schedule=sim.schedule(round),
        state=sim.store[client_id],
        generator=torch.Generator().manual_seed(client_seed(sim, client_id, round)),
        round=round,
        needs=sim.aggregator.needs,
        seed=sim.cfg.seed,
    )
    steps = planned_steps(sim.client_algo, ctx) if sim.compressor.needs_num_steps else None
    ctx.start_params = sim.compressor.start_point(sim.params, ctx.state, steps)
    return ctx


def planned_steps(algo: Any, ctx: LocalContext) -> int:
    """The number of local steps ``algo`` will take in ``ctx``: its batches, drawn from a copy
    of the client's generator (the real draws are left untouched)."""
    gen = torch.Generator().set_state(ctx.generator.get_state())
    return sum(1 for _ in algo.batches(replace(ctx, generator=gen)))


def rng_devices(sim: Any) -> list[torch.device]:
    return [sim.device] if sim.device.type == "cuda" else []


def seed_global_rng(sim: Any, seed: int) -> None:
    """Seed the generators a client's dropout draws from, as ``torch.manual_seed`` does.

    On CPU only the default generator is seeded (``torch.manual_seed`` also queues seeding of
    every accelerator backend, about 0.6 ms a call); the state, and so every draw, is the same.
    """
    torch.default_generator.manual_seed(seed)
    if sim.device.type == "cuda":
        torch.cuda.manual_seed_all(seed)


def attack(sim: Any, update: ClientUpdate, generator: torch.Generator) -> ClientUpdate:
    """A Byzantine client's update replaced by its attack (after training, as the server sees)."""
    if update.client_id in sim.byzantine:
        update.delta = attack_update(
            update.delta, sim.cfg.clients.attack, sim.cfg.clients.attack_strength, generator
        )
    return update


def global_rng_guard(model: nn.Module) -> Any:
    """The process-wide RNG lock when training draws from torch's global RNG (dropout), so
    simulations in parallel threads stay bit-identical; no lock otherwise."""
    stochastic = any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())
    return GLOBAL_RNG_LOCK if stochastic else nullcontext()


def train_client(sim: Any, client_id: int, round: int) -> ClientUpdate:
    """One client's local training in ``round`` (seeded by (seed, round, client))."""
    ctx = local_context(sim, client_id, round)
    with global_rng_guard(sim.model), torch.random.fork_rng(devices=rng_devices(sim)):
        seed_global_rng(sim, client_seed(sim, client_id, round))
        update = sim.client_algo.local_update(ctx)
    return attack(sim, update, ctx.generator)


def train_round(
    sim: Any, round: int, sampled: list[int], order: list[int] | None = None
) -> dict[int, ClientUpdate]:
    """Every sampled client's update, trained in ``order`` (default: ``sampled``)."""
    train_order = order if order is not None else sampled
    return {int(cid): sim.train_client(int(cid), round) for cid in train_order}
