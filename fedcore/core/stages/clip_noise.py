"""Client-side clipping and Gaussian noise on every uplink vector (the Gaussian mechanism's
client step, as in DP-FedAvg; docs/methods/clip_noise.md).

Each vector ``v`` the client sends becomes ``v * min(1, clip / ||v||) + N(0, (sigma clip)^2 I)``,
the noise drawn from a stream per (seed, round, client), so a run is reproducible."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from pydantic import Field

from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams
from fedcore.core.component.seeding import derive_seed
from fedcore.core.stages.base import Stage, register

if TYPE_CHECKING:
    from fedcore.core.records import ClientUpdate, StageContext


class ClipNoiseHParams(HParams):
    clip: float = Field(1.0, gt=0.0, description="L2 bound C on each uplink vector")
    sigma: float = Field(0.0, ge=0.0, description="noise multiplier: the noise std is sigma * C")


def clip_and_noise(
    v: torch.Tensor, clip: float, sigma: float, generator: torch.Generator
) -> torch.Tensor:
    """``v`` scaled to L2 norm at most ``clip``, plus N(0, (sigma clip)^2) per coordinate."""
    norm = float(v.norm())
    out = v * min(1.0, clip / norm) if norm > 0 else v.clone()
    if sigma > 0:
        noise = torch.randn(v.shape, generator=generator, dtype=v.dtype).to(v.device)
        out = out + sigma * clip * noise
    return out


@register("clip_noise")
class ClipNoise(Stage):
    side = "client"
    HParams: ClassVar[type[AnyHParams]] = ClipNoiseHParams
    hp: ClipNoiseHParams

    def on_update(self, update: ClientUpdate, rc: StageContext) -> None:
        seed = derive_seed(rc.cfg.seed, "clip_noise", rc.round, update.client_id)
        gen = torch.Generator().manual_seed(seed)
        for name in rc.uplink:
            update.set_vector(name, clip_and_noise(update.vector(name), self.hp.clip,
                                                   self.hp.sigma, gen))
