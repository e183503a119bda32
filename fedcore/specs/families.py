"""Comparison families and their seed plan as a sweep or claims file declares them: a paper's
method against its own baselines on an endpoint fixed in advance, and the seeds run in looks
(``fedcore.stats.looks`` decides them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedcore.core.config import ConfigError, limits
from fedcore.specs.sweep_file import check_entry_keys

LEVEL = 0.05  # family-wise error of every family's verdicts
MARGIN = 0.01  # default equivalence margin (accuracy points / 100)

# endpoint name -> (report column, whether higher is better, what it is)
ENDPOINTS: dict[str, tuple[str, bool, str]] = {
    "accuracy_last_k": ("accuracy_last_k", True,
                        "mean test accuracy of the last k evaluations (final/accuracy_last_k)"),
    "accuracy": ("accuracy", True, "test accuracy of the last evaluation (final/accuracy)"),
    "worst10": ("worst10", True,
                "mean local accuracy of the worst 10 % of clients at the last evaluation "
                "(final/accuracy_worst10)"),
}
DEFAULT_ENDPOINT = "accuracy_last_k"
DEFAULT_SECONDARY = ("accuracy", "worst10")
FAMILY_KEYS = ("name", "paper", "reference", "baselines", "endpoint", "secondary", "margin",
               "alpha", "protocol")


@dataclass(frozen=True)
class SeedPlan:
    """Seeds in looks: ``looks[k]`` seeds in all by look k (``seeds[:looks[k]]``)."""

    seeds: tuple[int, ...]
    looks: tuple[int, ...]

    @property
    def level_per_look(self) -> float:
        return LEVEL / len(self.looks)

    def at(self, look: int) -> tuple[int, ...]:
        """The seeds of look ``look`` (0-based) and all before it."""
        return self.seeds[: self.looks[look]]


def seed_plan(raw: Any, where: str) -> SeedPlan:
    """``seeds: [0, 1, 2]`` (one look) or ``seeds: {looks: [3, 5, 8], start: 0}``, checked."""
    if isinstance(raw, list):
        if not raw or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                              for s in raw) or len(set(raw)) != len(raw):
            raise ConfigError(f"{where}.seeds: expected distinct seeds >= 0 "
                              f"(got {limits.shown(raw)})")
        limits.check_count(f"{where}.seeds (seeds listed)", len(raw), limits.SEEDS)
        limits.check_count(f"{where}.seeds (largest seed)", max(raw), limits.SEED)
        return SeedPlan(tuple(raw), (len(raw),))
    if not isinstance(raw, dict) or set(raw) - {"looks", "start"} or "looks" not in raw:
        raise ConfigError(f"{where}.seeds: expected a list of seeds or a mapping "
                          "{looks: [n1, n2, ...], start: first seed}")
    looks, start = raw["looks"], raw.get("start", 0)
    ok = (isinstance(looks, list) and looks
          and all(isinstance(n, int) and not isinstance(n, bool) and n >= 2 for n in looks)
          and all(a < b for a, b in zip(looks, looks[1:], strict=False)))
    if not ok:
        raise ConfigError(f"{where}.seeds.looks: expected increasing seed counts >= 2, e.g. "
                          f"[3, 5, 8] (got {limits.shown(looks)})")
    limits.check_count(f"{where}.seeds.looks (number of looks)", len(looks), limits.LOOKS)
    limits.check_count(f"{where}.seeds.looks (seeds of the last look)", looks[-1], limits.SEEDS)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ConfigError(f"{where}.seeds.start: expected a seed >= 0 "
                          f"(got {limits.shown(start)})")
    limits.check_count(f"{where}.seeds (largest seed: start + last look - 1)",
                       start + looks[-1] - 1, limits.SEED)
    return SeedPlan(tuple(range(start, start + looks[-1])), tuple(looks))


@dataclass(frozen=True)
class Family:
    """A paper's method (``reference``, a row label) against its own baselines (row labels)."""

    name: str
    paper: str
    reference: str
    baselines: tuple[str, ...]
    endpoint: str = DEFAULT_ENDPOINT
    secondary: tuple[str, ...] = DEFAULT_SECONDARY
    margin: float = MARGIN
    alpha: float | None = None  # the Dirichlet alpha it is judged at (None: every alpha)
    protocol: str | None = None  # the paper protocol its rows run (fedcore.specs.protocols)
    horizon: int | None = None  # the protocol's rounds: fewer carry no verdicts
    protocol_note: str = ""  # its recipe and what runs scaled, for the report

    @property
    def rows(self) -> tuple[str, ...]:
        return (self.reference, *self.baselines)


def parse_families(raw: Any, where: str,
                   protocols: Mapping[str, Any] | None = None) -> tuple[Family, ...]:
    """A file's ``families:`` list, each ``{name, paper, reference, baselines, endpoint?,
    secondary?, margin?, alpha?, protocol?}``; one-line errors naming the key. With
    ``protocol`` (a name in the file's ``protocols:``) its rows are that protocol's rows:
    ``fedavg`` names ``fedavg @craft``."""
    protocols = protocols or {}
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.families: expected a list of families")
    out = []
    for i, f in enumerate(raw):
        at = f"{where}.families[{i}]"
        check_entry_keys(f, FAMILY_KEYS, at)
        for key in ("name", "reference", "baselines"):
            if key not in f:
                raise ConfigError(f"{at}.{key}: missing")
        base = f["baselines"]
        if not isinstance(base, list) or not base or not all(isinstance(b, str) for b in base):
            raise ConfigError(f"{at}.baselines: expected a non-empty list of row labels")
        if f["reference"] in base:
            raise ConfigError(f"{at}.baselines: the reference {f['reference']!r} is not its own "
                              "baseline")
        endpoint = f.get("endpoint", DEFAULT_ENDPOINT)
        secondary = f.get("secondary", list(DEFAULT_SECONDARY))
        for key, names in (("endpoint", [endpoint]), ("secondary", secondary)):
            bad = [n for n in names if n not in ENDPOINTS]
            if bad:
                raise ConfigError(f"{at}.{key}: unknown {bad[0]!r}; allowed: "
                                  f"{', '.join(ENDPOINTS)}")
        margin = f.get("margin", MARGIN)
        if not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise ConfigError(f"{at}.margin: expected an equivalence margin in [0, 1) "
                              f"(got {margin!r})")
        alpha = f.get("alpha")
        if alpha is not None and (not isinstance(alpha, (int, float)) or alpha <= 0):
            raise ConfigError(f"{at}.alpha: expected a Dirichlet alpha > 0 (got {alpha!r})")
        proto = f.get("protocol")
        if proto is not None and proto not in protocols:
            raise ConfigError(f"{at}.protocol: unknown protocol {proto!r}; allowed: "
                              f"{', '.join(protocols) or 'none (the file has no protocols:)'}")
        mark = "" if proto is None else f" @{proto}"
        out.append(Family(str(f["name"]), str(f.get("paper", f["name"])),
                          str(f["reference"]) + mark, tuple(f"{b}{mark}" for b in base), endpoint,
                          tuple(s for s in secondary if s != endpoint), float(margin),
                          None if alpha is None else float(alpha),
                          None if proto is None else str(proto),
                          None if proto is None else int(protocols[proto].horizon),
                          "" if proto is None else protocols[proto].note()))
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.families: duplicate name in {names}")
    return tuple(out)
