"""The ``system`` block: clients that are not always there, train at different speeds and
report late, on a simulated clock (docs/how-to/stragglers.md; fedcore.core.system)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from fedcore.core.config.numbers import StrictNumbers


class SystemConfig(StrictNumbers):
    """Availability, speed, link time and deadline of the clients (all off by default: every
    client is always there and every round takes no simulated time)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False)

    availability: Literal["always", "probability", "periodic"] = Field(
        "always", description="always; probability: each client is there at a round's start "
        "with `system.available_p`, drawn per round; periodic: each client is on for "
        "`system.on_fraction` of every `system.period_s`, from a phase drawn per client")
    available_p: float = Field(
        1.0, gt=0, le=1, description="availability=probability: the chance a client is there")
    period_s: float = Field(
        100.0, gt=0, description="availability=periodic: the simulated seconds of one on/off "
        "cycle")
    on_fraction: float = Field(
        0.5, gt=0, le=1, description="availability=periodic: the share of a cycle a client is "
        "on")
    speed: Literal["constant", "lognormal", "uniform"] = Field(
        "constant", description="how the clients' seconds per local step are spread, drawn "
        "once per client from the seed: constant (`system.step_s` each), lognormal "
        "(`step_s` times exp(N(0, spread^2))) or uniform (`step_s` times U(1, 1 + spread))")
    speed_spread: float = Field(
        0.0, ge=0, le=10, description="speed=lognormal: sigma; speed=uniform: the slowest "
        "client's extra factor; 0 with speed=constant")
    step_s: float = Field(
        1.0, gt=0, description="simulated seconds of one local step of a client of speed 1")
    link_s: float = Field(
        0.0, ge=0, description="simulated seconds a client spends receiving the model and "
        "sending its update, per round")
    deadline_s: float | None = Field(
        None, gt=0, description="the round's deadline in simulated seconds after it starts "
        "(unset: the server waits for every sampled client); synchronous rules only")
    late: Literal["drop", "partial"] = Field(
        "drop", description="a client not done by the deadline: drop (its update never "
        "arrives) or partial (it sends the local steps it did by the deadline, FedNova's "
        "setting)")
    retry_s: float = Field(
        1.0, gt=0, description="simulated seconds the server waits before it looks again when "
        "no client is available")

    @model_validator(mode="after")
    def _consistent(self) -> SystemConfig:
        if self.available_p != 1.0 and self.availability != "probability":
            raise ValueError(f"system.available_p: set with system.availability="
                             f"{self.availability}; allowed: 1.0, or availability=probability")
        if self.speed == "constant" and self.speed_spread != 0:
            raise ValueError("system.speed_spread: set with system.speed=constant; allowed: 0, "
                             "or speed lognormal or uniform")
        if self.late == "partial" and self.deadline_s is None:
            raise ValueError("system.late: partial needs system.deadline_s; allowed: drop, or "
                             "set a deadline")
        if self.deadline_s is not None and self.deadline_s <= self.link_s:
            raise ValueError(f"system.deadline_s: {self.deadline_s:g} leaves no time to train "
                             f"after system.link_s={self.link_s:g}; allowed: more than link_s")
        return self

    @property
    def active(self) -> bool:
        """Whether the block holds anything but its defaults (then rounds take time)."""
        return self != SystemConfig()
