"""A claims file (``configs/claims.yaml``, ``fedcore claims``), read and checked before anything
runs: the base experiment, the seed plan and, per claim, the paper's local recipe, the method's
run, the baseline's run, the metric, the test and the date it was fixed. A record beside it
(``<file>.record.yaml``) keeps a digest of every claim as fixed: a claim whose regime changes
without a new id is refused, so a claim cannot move after its result was seen (a changed claim
is a new claim). ``fedcore.stats.claims`` judges the claims on their runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, ExperimentConfig, config_dir, read_yaml
from fedcore.specs.families import SeedPlan, seed_plan
from fedcore.specs.hparams import regime
from fedcore.specs.sweep import tuning_studies
from fedcore.specs.sweep_file import read_base

TESTS = ("zero_every_round", "at_least", "lower", "noisy_below_clean")
REDUCES = ("final", "mean", "max")
KINDS = ("claim", "robustness check", "implementation check")
CLAIM_KEYS = ("id", "paper", "claim", "kind", "recipe", "test", "run", "baseline", "metric",
              "reduce", "fixed", "margin", "note")
FILE_KEYS = ("name", "base", "set", "seeds", "studies", "claims")



@dataclass(frozen=True)
class Claim:
    """One claim: ``test`` compares ``metric`` (reduced over rounds) of ``run`` to ``baseline``."""

    id: str
    paper: str
    claim: str
    test: str
    run: dict[str, Any]
    baseline: dict[str, Any] | None
    metric: str
    reduce: str
    kind: str = "claim"
    recipe: str | None = None  # configs/experiments/<recipe>.yaml: its local block, both runs
    fixed: str = ""  # the date the claim was fixed (before its first result)
    margin: float = 0.0  # equivalence margin on the metric (0: no equivalence verdict)
    note: str = ""


@dataclass(frozen=True)
class ClaimsSpec:
    """A validated claims file. A run's keys, from weakest: ``base``, ``fixed`` (the file's
    ``set``), the claim's recipe (its local optimiser), the claim's run, ``overrides`` (the
    command line), the seed."""

    name: str
    base: dict[str, Any]
    fixed: dict[str, Any]
    seeds: tuple[int, ...]
    claims: tuple[Claim, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, str] = field(default_factory=dict)
    plan: SeedPlan | None = None
    record: Path | None = None  # the record of the fixed claims (None: not checked)

    @property
    def seed_plan(self) -> SeedPlan:
        return self.plan or SeedPlan(self.seeds, (len(self.seeds),))

    @property
    def exploratory(self) -> bool:
        """Overrides change the fixed regime: results are a quick look, not the claims."""
        return bool(self.overrides)

    def config(self, run: dict[str, Any], seed: int,
               recipe: str | None = None) -> ExperimentConfig:
        local = recipe_local(recipe) if recipe else {}
        given = {k: v for k, v in self.overrides.items() if k != "seeds"}
        return build_config(self.base, {**self.fixed, **local, **run, **given, "seed": seed})

    def configs(self, claim: Claim, seed: int) -> tuple[ExperimentConfig, ExperimentConfig | None]:
        """The claim's run and baseline (None) at ``seed``."""
        base = claim.baseline
        return (self.config(claim.run, seed, claim.recipe),
                None if base is None else self.config(base, seed, claim.recipe))


def recipe_local(name: str) -> dict[str, Any]:
    """The local block of ``configs/experiments/<name>.yaml`` as dotted overrides."""
    path = config_dir() / "experiments" / f"{name}.yaml"
    if not path.is_file():
        have = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ConfigError(f"recipe: unknown {name!r}; allowed: {have}")
    local = read_yaml(path).get("local") or {}
    return {f"local.{k}": v for k, v in local.items()}




def load_claims(path: str | Path, overrides: dict[str, Any] | None = None) -> ClaimsSpec:
    """Read and validate a claims file; ``overrides`` set ``seeds`` or any experiment key.

    Every claim's runs are built for every seed here, before any compute.
    """
    path = Path(path)
    raw = read_yaml(path)
    unknown = sorted(set(raw) - set(FILE_KEYS))
    if unknown:
        raise ConfigError(f"claims: unknown key {unknown[0]!r}; allowed: {', '.join(FILE_KEYS)}")
    overrides = dict(overrides or {})
    seeds_given = overrides.get("seeds")
    seeds = overrides.pop("seeds", raw.get("seeds", [0, 1, 2]))
    seeds = [seeds] if isinstance(seeds, int) else seeds
    if isinstance(seeds, list) and seeds and all(isinstance(s, int) and s >= 0 for s in seeds):
        plan = SeedPlan(tuple(seeds), (len(seeds),))
    elif isinstance(seeds, dict):
        plan = seed_plan(seeds, "claims")
    else:
        raise ConfigError(f"claims.seeds: expected a non-empty list of seeds >= 0 or "
                          f"{{looks: [n1, n2, ...]}} (got {seeds!r})")
    record = path.with_name(f"{path.stem}.record.yaml")
    spec = ClaimsSpec(
        name=str(raw.get("name") or path.stem),
        base=read_base(raw.get("base"), path),
        fixed=dict(raw.get("set") or {}),
        seeds=plan.seeds,
        claims=tuple(_claim(i, c) for i, c in enumerate(raw.get("claims") or [])),
        overrides=overrides,
        tuning=tuning_studies(raw.get("studies"), list(plan.seeds), "claims"),
        plan=plan,
        record=record if record.is_file() else None,
    )
    if seeds_given is not None:  # the seed plan is part of the fixed regime too
        spec = replace(spec, overrides={**spec.overrides, "seeds": seeds_given})
    if not spec.claims:
        raise ConfigError("claims.claims: expected a non-empty list of claims")
    ids = [c.id for c in spec.claims]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"claims.claims: duplicate id in {ids}")
    for c in spec.claims:
        try:
            for seed in spec.seeds:
                spec.configs(c, seed)
        except ConfigError as exc:
            raise ConfigError(f"claims.{c.id}: {exc}") from None
    if spec.record is not None:
        check_record(spec, raw)
    return spec


def claim_digest(claim: dict[str, Any], raw: dict[str, Any]) -> str:
    """What a claim fixes, as a digest: its own keys (all but ``note``) and the file's base,
    ``set`` and seeds, which every claim's regime depends on."""
    import hashlib
    import json

    keyed = {"claim": {k: v for k, v in claim.items() if k != "note"},
             "base": raw.get("base"), "set": raw.get("set"), "seeds": raw.get("seeds")}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def check_record(spec: ClaimsSpec, raw: dict[str, Any]) -> None:
    """Refuse a claim whose regime changed after it was fixed (its digest differs from the
    record's): a changed claim is a new claim, with a new id."""
    record = read_yaml(spec.record) if spec.record is not None else {}
    for c in raw.get("claims") or []:
        entry = (record or {}).get(c["id"])
        if entry is None:
            continue
        if entry.get("digest") != claim_digest(c, raw):
            raise ConfigError(
                f"claims.{c['id']}: its regime differs from the one fixed on "
                f"{entry.get('fixed', '?')} ({spec.record}); a claim changed after it was fixed "
                "is a new claim: give it a new id, and keep the old one's result in the docs")


def record_claims(path: str | Path) -> list[str]:
    """Add every claim of ``path`` that the record lacks to ``<file>.record.yaml`` (its date
    and digest); claims already recorded are never rewritten. Returns the ids added."""
    import yaml

    path = Path(path)
    raw = read_yaml(path)
    record_path = path.with_name(f"{path.stem}.record.yaml")
    record = read_yaml(record_path) if record_path.is_file() else {}
    record = record or {}
    added = []
    for c in raw.get("claims") or []:
        if c["id"] in record:
            continue
        if not c.get("fixed"):
            raise ConfigError(f"claims.{c['id']}.fixed: missing; the date the claim was fixed")
        record[c["id"]] = {"fixed": str(c["fixed"]), "digest": claim_digest(c, raw)}
        added.append(c["id"])
    header = ("# The claims of claims.yaml as they were fixed, before their results were seen\n"
              "# (fedcore claims --record adds new ones; an entry is never rewritten: a claim\n"
              "# whose regime changes needs a new id). Checked by every `fedcore claims`.\n")
    record_path.write_text(header + yaml.safe_dump(record, sort_keys=False))
    return added


def _claim(index: int, raw: Any) -> Claim:
    where = f"claims.claims[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {', '.join(CLAIM_KEYS)}")
    unknown = sorted(set(raw) - set(CLAIM_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(CLAIM_KEYS)}")
    for key in ("id", "paper", "claim", "test", "run", "metric"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: missing")
    if raw["test"] not in TESTS:
        raise ConfigError(f"{where}.test: unknown {raw['test']!r}; allowed: {', '.join(TESTS)}")
    reduce = raw.get("reduce", "final")
    if reduce not in REDUCES:
        raise ConfigError(f"{where}.reduce: unknown {reduce!r}; allowed: {', '.join(REDUCES)}")
    kind = raw.get("kind", "claim")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: unknown {kind!r}; allowed: {', '.join(KINDS)}")
    if (raw["test"] == "zero_every_round") != (kind == "implementation check"):
        raise ConfigError(f"{where}.kind: test zero_every_round holds by construction, so it is "
                          "an implementation check, and only it is")
    recipe = raw.get("recipe")
    if recipe is not None:
        if not isinstance(recipe, str):
            raise ConfigError(f"{where}.recipe: expected the name of a configs/experiments file")
        try:
            recipe_local(recipe)
        except ConfigError as exc:
            raise ConfigError(f"{where}.{exc}") from None
    compares = raw["test"] in ("at_least", "lower")
    if compares != ("baseline" in raw):
        need = "needs" if compares else "takes no"
        raise ConfigError(f"{where}.baseline: test {raw['test']} {need} a baseline run")
    for key in ("run", "baseline"):
        if key in raw and not isinstance(raw[key], dict):
            raise ConfigError(f"{where}.{key}: expected a mapping of KEY: value")
    margin = raw.get("margin", 0.01 if str(raw["metric"]).startswith(
        ("final/accuracy", "auc/accuracy")) and compares else 0.0)
    if not isinstance(margin, (int, float)) or margin < 0:
        raise ConfigError(f"{where}.margin: expected an equivalence margin >= 0 (got {margin!r})")
    return Claim(str(raw["id"]), str(raw["paper"]), str(raw["claim"]), raw["test"],
                 dict(raw["run"]), raw.get("baseline"), str(raw["metric"]), reduce, kind, recipe,
                 str(raw.get("fixed", "")), float(margin), str(raw.get("note", "")))



def setting(spec: ClaimsSpec, claim: Claim) -> str:
    """The claim's experiment in words: data, model, partition, clients, rounds, seeds, the
    local recipe, runs."""
    cfg, base_cfg = spec.configs(claim, spec.seeds[0])
    ds, lo = cfg.dataset, cfg.local
    skew = f"Dir {ds.alpha}" if ds.partition == "dirichlet" else ds.partition
    work = f"{lo.steps} steps" if lo.steps else f"{lo.epochs} epoch{'s' * (lo.epochs > 1)}"
    text = (f"{ds.name} {cfg.model.name}, {skew}, {ds.num_clients} clients "
            f"({cfg.clients_per_round}/round), {cfg.rounds} rounds, {len(spec.seeds)} seeds; "
            f"local: {claim.recipe or 'default'} recipe ({work}, batch {lo.batch_size}, "
            f"lr {lo.lr}, momentum {lo.momentum}"
            + (f", wd {lo.weight_decay}" if lo.weight_decay else "")
            + (f", {lo.lr_schedule}" if lo.lr_schedule != "constant" else "") + ")")
    skip = {"method", "dataset.alpha"}
    extra = ", ".join(f"{k}={v}" for k, v in claim.run.items() if k not in skip)
    text += f"; {cfg.method.name}" + (f" ({extra})" if extra else "")
    if claim.baseline is not None and base_cfg is not None:
        extra = ", ".join(f"{k}={v}" for k, v in claim.baseline.items() if k not in skip)
        text += f" vs {base_cfg.method.name}" + (f" ({extra})" if extra else "")
    return text


def regime_text(spec: ClaimsSpec, claim: Claim) -> str:
    """The regime of the claim's run and of its baseline (``fedcore.specs.hparams``)."""
    cfg, base_cfg = spec.configs(claim, spec.seeds[0])
    text = regime(cfg.resolved()).label
    if base_cfg is not None:
        text += f"; baseline: {regime(base_cfg.resolved()).label}"
    return text


def experiments(spec: ClaimsSpec) -> dict[str, ExperimentConfig]:
    """Every distinct experiment of the claims at every seed of the plan, by config hash, in
    claim order."""
    out: dict[str, ExperimentConfig] = {}
    for c in spec.claims:
        for seed in spec.seeds:
            for cfg in spec.configs(c, seed):
                if cfg is not None:
                    out.setdefault(cfg.config_hash(), cfg)
    return out
