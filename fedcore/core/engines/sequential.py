"""The sequential engine: each sampled client trains on its own, one after the other, with
autograd (the shared template of ``fedcore.core.clients.template``, ``run_client``)."""

from __future__ import annotations

import torch
from torch import nn

from fedcore.core.clients.template import client_seed, local_context, run_client
from fedcore.core.component.seeding import GLOBAL_RNG_LOCK
from fedcore.core.engines.round_context import RoundContext
from fedcore.core.records import ClientUpdate

NAME = "sequential"
__all__ = ["NAME", "RANDOM_LAYERS", "client_seed", "draws_global_rng", "local_context",
           "rng_devices", "seed_global_rng", "train_client", "train_round"]


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


RANDOM_LAYERS: tuple[type[nn.Module], ...] = (nn.modules.dropout._DropoutNd, nn.RReLU)
"""torch's layers that draw from the global RNG in training mode."""


def draws_global_rng(model: nn.Module, client_algo: object) -> bool:
    """Whether training ``model`` with ``client_algo`` may draw from torch's global RNG: a
    random layer (dropout, RReLU), or a module or client objective whose code is neither
    fedcore's nor ``torch.nn``'s (a plugin may call ``torch.randn``). fedcore's own code draws
    everything else from explicit generators."""
    def foreign(obj: object) -> bool:
        module = type(obj).__module__
        return not module.startswith(("fedcore.", "torch.nn."))

    return foreign(client_algo) or any(
        isinstance(m, RANDOM_LAYERS) or foreign(m) for m in model.modules())


def train_client(rc: RoundContext, client_id: int) -> ClientUpdate:
    """One client's local training in the round (seeded by (seed, round, client)).

    Training that may draw from torch's global RNG (``draws_global_rng``) seeds it, under
    ``GLOBAL_RNG_LOCK`` like every other section that seeds or draws from it (model
    initialisation), and restores it after; other training leaves it untouched, so it never
    changes the generator while another thread's section uses it."""
    ctx = local_context(rc, client_id, rc.client_algo)
    if not draws_global_rng(rc.model, rc.client_algo):
        return run_client(rc.client_algo, ctx)
    with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=rng_devices(rc)):
        seed_global_rng(rc, client_seed(rc, client_id))
        return run_client(rc.client_algo, ctx)


def train_round(
    rc: RoundContext, sampled: list[int], order: list[int] | None = None
) -> dict[int, ClientUpdate]:
    """Every sampled client's update, trained in ``order`` (default: ``sampled``)."""
    train_order = order if order is not None else sampled
    return {int(cid): train_client(rc, int(cid)) for cid in train_order}
