"""Seed-paper claims checked on small offline experiments (``fedcore claims``).

A claims file (``configs/claims.yaml``) fixes, before anything runs, the base experiment, the
seed plan and, per claim, the paper's local recipe, the method's run, the baseline's run, the
metric, the test and the date it was fixed. A record beside it (``<file>.record.yaml``) keeps a
digest of every claim as fixed: a claim whose regime changes without a new id is refused, so a
claim cannot move after its result was seen (a changed claim is a new claim).

Running it simulates every distinct experiment per seed, look by look, and judges the claims of
each paper as one family with the machinery of the sweeps (``fedcore.pipeline.families``):
``holds`` (the paired test finds the claimed direction), ``contradicted`` (the opposite),
``equivalent`` (within the claim's margin), ``inconclusive`` otherwise. A claim whose runs are
still climbing at the horizon says ``early training``. A check that holds by construction is an
``implementation check`` and is judged ``passes``/``fails``, apart from the claims. Everything
here is plain computation on ``fedcore.core.round.simulation.Result`` objects; MLflow lives in
``fedcore.tracking.claims``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.core.compose.configure import build_config
from fedcore.core.config import ConfigError, ExperimentConfig, config_dir, read_yaml
from fedcore.core.round.simulation import Result
from fedcore.pipeline.families import Family, SeedPlan, decide, seed_plan
from fedcore.pipeline.hparams import regime
from fedcore.pipeline.stats import Comparison, mean_interval
from fedcore.pipeline.sweep import tuning_studies
from fedcore.pipeline.sweep_file import read_base

TESTS = ("zero_every_round", "at_least", "lower", "noisy_below_clean")
REDUCES = ("final", "mean", "max")
KINDS = ("claim", "robustness check", "implementation check")
CLAIM_KEYS = ("id", "paper", "claim", "kind", "recipe", "test", "run", "baseline", "metric",
              "reduce", "fixed", "margin", "note")
FILE_KEYS = ("name", "base", "set", "seeds", "studies", "claims")
VERDICTS = ("holds", "contradicted", "equivalent", "inconclusive", "passes", "fails")
FLAT_WINDOW = 5  # evaluations over which a trained run's accuracy moves less than FLAT_GAIN
FLAT_GAIN = 0.01


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


@dataclass(frozen=True)
class ClaimRow:
    """One line of the claims table."""

    id: str
    claim: str
    setting: str
    measured: str
    verdict: str
    values: tuple[float, ...]
    baseline_values: tuple[float, ...] | None
    kind: str = "claim"
    regime: str = ""
    comparison: Comparison | None = None
    training: str = ""  # "trained" or "early training: ..." (accuracy still climbing)
    decided_at: int | None = None

    @property
    def holds(self) -> bool:
        """The paired test found the claimed direction (or an implementation check passed)."""
        return self.verdict in ("holds", "passes")


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


def measure(result: Result, metric: str, reduce: str, rounds: int) -> float:
    """``metric`` of one run: the summary value or the last/mean/max over rounds that have it.

    ``rounds_to_target`` of a run that never reached the target counts as ``rounds + 1``.
    """
    if metric == "rounds_to_target":
        return float(result.summary.get(metric, rounds + 1))
    if reduce == "final" and metric in result.summary:
        return float(result.summary[metric])
    values = [h[metric] for h in result.history if metric in h]
    if not values:
        raise KeyError(f"metric {metric!r} was not recorded by {result.config['method']['name']}")
    return float({"final": values[-1], "mean": np.mean(values), "max": np.max(values)}[reduce])


def noisy_and_clean(result: Result, stat: str) -> tuple[float, float]:
    """Mean per-client ``stat`` of noisy and of clean clients over every evaluated round in
    which they were aggregated."""
    noisy, clean = [], []
    for table in result.client_tables:
        values = table.extra[stat]
        seen = ~np.isnan(values)
        flags = table.extra["noisy"].astype(bool)
        noisy.extend(values[seen & flags])
        clean.extend(values[seen & ~flags])
    return (float(np.mean(noisy)) if noisy else math.nan,
            float(np.mean(clean)) if clean else math.nan)


def _stats(values: list[float] | tuple[float, ...]) -> str:
    return mean_interval(values).text(".4g")


def oriented(test: str, values: list[float], baseline: list[float] | None) -> list[float]:
    """Per seed, the claimed direction as a positive number: ``values - baseline``
    (``at_least``), ``baseline - values`` (``lower``), ``values`` for ``noisy_below_clean``
    (already clean - noisy)."""
    if test == "noisy_below_clean":
        return list(values)
    if baseline is None:
        raise ValueError(f"test {test} needs baseline values")
    if test == "at_least":
        return [v - b for v, b in zip(values, baseline, strict=True)]
    if test == "lower":
        return [b - v for v, b in zip(values, baseline, strict=True)]
    raise ValueError(f"unknown test {test!r}; allowed: {', '.join(TESTS)}")


def verdict(test: str, values: list[float], comparison: Comparison | None) -> str:
    """holds / contradicted / equivalent / inconclusive from a claim's family comparison (on
    the claimed direction); passes / fails for an implementation check."""
    if test == "zero_every_round":
        return "passes" if values and all(v == 0 for v in values) else "fails"
    if comparison is None:
        return "inconclusive"
    return {"better": "holds", "worse": "contradicted",
            "equivalent": "equivalent"}.get(comparison.verdict, "inconclusive")


def training_state(runs: list[Result]) -> str:
    """``trained`` when the mean test accuracy over seeds moved by less than FLAT_GAIN over the
    last FLAT_WINDOW evaluations, else ``early training (+0.052 over the last 5
    evaluations)``: a comparison there measures speed, not the end point."""
    gains = []
    for r in runs:
        acc = [h["test/accuracy"] for h in r.history if "test/accuracy" in h]
        if len(acc) >= 2:
            window = acc[-FLAT_WINDOW:]
            gains.append(window[-1] - window[0])
    if not gains:
        return ""
    gain = float(np.mean(gains))
    if abs(gain) < FLAT_GAIN:
        return "trained"
    return f"early training ({gain:+.3f} over the last {FLAT_WINDOW} evaluations)"


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
    """The regime of the claim's run and of its baseline (``fedcore.pipeline.hparams``)."""
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


def evaluate(spec: ClaimsSpec, results: dict[str, Result],
             diverged: dict[str, str] | None = None) -> list[ClaimRow]:
    """Judge every claim on ``results`` (by config hash; see ``experiments``), replaying the
    seed plan's looks: the claims of one paper are one family (Holm within it at 5 % over the
    looks; ``fedcore.pipeline.families.decide``). A claim with a diverged run (``diverged``:
    config hash -> what diverged) gets no verdict and says which run diverged."""
    diverged = diverged or {}
    plan = spec.seed_plan
    per_claim: dict[str, dict[int, float]] = {}
    failed: dict[str, dict[int, str]] = {}
    measured: dict[str, str] = {}
    runs_of: dict[str, list[Result]] = {}
    raw_values: dict[str, list[float]] = {}
    base_of: dict[str, list[float]] = {}
    for c in spec.claims:
        values: dict[int, float] = {}
        own, base_values, runs = [], [], []
        for seed in plan.seeds:
            run, base = spec.configs(c, seed)
            lost = [diverged[x.config_hash()] for x in (run, base)
                    if x is not None and x.config_hash() in diverged]
            if lost:
                failed.setdefault(c.id, {})[seed] = "; ".join(lost)
                continue
            if run.config_hash() not in results or (
                    base is not None and base.config_hash() not in results):
                continue
            r = results[run.config_hash()]
            runs.append(r)
            rounds = r.config["rounds"]
            if c.test == "noisy_below_clean":
                noisy, clean = noisy_and_clean(r, c.metric)
                own.append(clean - noisy)
                values[seed] = clean - noisy
                continue
            v = measure(r, c.metric, c.reduce, rounds)
            own.append(v)
            if base is not None:
                b = measure(results[base.config_hash()], c.metric, c.reduce, rounds)
                runs.append(results[base.config_hash()])
                base_values.append(b)
                values[seed] = oriented(c.test, [v], [b])[0]
            else:
                values[seed] = v
        per_claim[c.id] = {s: v for s, v in values.items() if not math.isnan(v)}
        raw_values[c.id] = own
        base_of[c.id] = base_values
        runs_of[c.id] = runs
        how = "" if c.reduce == "final" else f"{c.reduce} over rounds of "
        measured[c.id] = (f"{how}{c.metric}: {_stats(own)}" if c.test != "noisy_below_clean"
                          else f"clean − noisy {c.metric}: {_stats(own)}")
        if base_values:
            measured[c.id] += f" vs {_stats(base_values)}"
    decisions = {}
    for paper in dict.fromkeys(c.paper for c in spec.claims):
        mine = [c for c in spec.claims if c.paper == paper and c.test != "zero_every_round"]
        for margin in sorted({c.margin for c in mine}):
            group = [c for c in mine if c.margin == margin]
            fam = Family(paper, paper, "0", tuple(c.id for c in group), "accuracy",
                         margin=margin)
            zero = {s: 0.0 for s in plan.seeds}
            table: dict[str, dict[int, float]] = {"0": zero, **{
                c.id: {s: -v for s, v in per_claim[c.id].items()} for c in group}}
            outcome = decide(fam, plan, table, {c.id: failed.get(c.id, {}) for c in group})
            decisions.update({d.baseline: d for d in outcome.decisions})
    rows = []
    for c in spec.claims:
        d = decisions.get(c.id)
        comparison = d.comparison if d is not None and not d.blocked else None
        text = measured[c.id]
        if d is not None and d.blocked:
            text = f"not judged: {d.blocked}; " + text
        elif comparison is not None:
            text += f"; claimed direction {comparison.text('+.4g')}"
        state = training_state(runs_of[c.id]) if c.baseline is not None else ""
        rows.append(ClaimRow(
            id=c.id, claim=f"{c.paper}: {c.claim}", setting=setting(spec, c), measured=text,
            verdict=verdict(c.test, raw_values[c.id], comparison), values=tuple(raw_values[c.id]),
            baseline_values=tuple(base_of[c.id]) if c.baseline is not None else None,
            kind=c.kind, regime=regime_text(spec, c),
            comparison=comparison, training=state,
            decided_at=None if d is None else d.decided_at,
        ))
    return rows


def open_claims(spec: ClaimsSpec, rows: list[ClaimRow]) -> list[Claim]:
    """Claims that the next look still needs (no verdict yet, not blocked)."""
    done = {r.id for r in rows if r.verdict != "inconclusive" or r.measured.startswith(
        "not judged")}
    return [c for c in spec.claims if c.id not in done and c.test != "zero_every_round"]


def run_claims(
    spec: ClaimsSpec,
    simulate: Callable[[ExperimentConfig], Result] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[ClaimRow]:
    """Simulate the experiments of ``spec`` look by look (``simulate``: default untracked),
    each once, and judge; a look runs only the seeds of claims still undecided."""
    if simulate is None:
        from fedcore.core.round.simulation import run as untracked

        simulate = untracked
    plan = spec.seed_plan
    results: dict[str, Result] = {}
    diverged: dict[str, str] = {}
    todo_claims = list(spec.claims)
    rows: list[ClaimRow] = []
    for look in range(len(plan.looks)):
        todo: dict[str, ExperimentConfig] = {}
        for c in todo_claims:
            for seed in plan.at(look):
                for cfg in spec.configs(c, seed):
                    if cfg is not None and cfg.config_hash() not in results:
                        todo.setdefault(cfg.config_hash(), cfg)
        for i, (h, cfg) in enumerate(todo.items(), 1):
            if h in diverged:
                continue
            if progress:
                noisy = f" noisy_fraction={cfg.clients.noisy_fraction}" * (
                    cfg.clients.noisy_fraction > 0)
                progress(f"[look {look + 1}: {i}/{len(todo)}] {cfg.method.name} "
                         f"seed={cfg.seed}{noisy}")
            try:
                results[h] = simulate(cfg)
            except FloatingPointError as exc:  # a diverged run: its claims cannot be judged
                if progress:
                    progress(f"  diverged: {exc}")
                diverged[h] = f"{cfg.method.name} seed {cfg.seed} diverged"
        rows = evaluate(spec, results, diverged)
        todo_claims = open_claims(spec, rows)
        if not todo_claims:
            break
    return rows


def verdict_text(row: ClaimRow) -> str:
    """``holds (5 seeds)``, ``contradicted``, ``equivalent``, ``inconclusive (detects ±0.03)``,
    ``passes`` or ``fails``, with ``early training`` where the runs still climb."""
    c = row.comparison
    if row.measured.startswith("not judged: "):
        return f"{row.verdict} (a run diverged)"
    text = row.verdict
    if row.decided_at:
        text += f" ({row.decided_at} seeds)"
    elif row.verdict == "inconclusive" and c is not None and math.isfinite(c.detectable):
        text += f" (detects ±{c.detectable:.2g} at {c.n} seeds)"
    if row.training.startswith("early"):
        text += "; early training"
    return text


def markdown(rows: list[ClaimRow]) -> str:
    """The claims table: claim | kind | setting | regime | horizon | measured | verdict."""
    lines = ["| claim | kind | setting | regime | at the horizon | measured (mean [95 % "
             "interval] over seeds) | verdict |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.claim} | {r.kind} | {r.setting} | {r.regime} | {r.training or '—'} | "
              f"{r.measured} | **{verdict_text(r)}** |" for r in rows]
    return "\n".join(lines)


def tally(rows: list[ClaimRow]) -> str:
    """``claims: 2 hold, 1 contradicted, 5 inconclusive; implementation checks: 1 passes``."""
    parts = []
    for kinds, name in ((("claim", "robustness check"), "claims"),
                        (("implementation check",), "implementation checks")):
        mine = [r.verdict for r in rows if r.kind in kinds]
        if mine:
            counts = ", ".join(f"{mine.count(v)} {v}" for v in VERDICTS if v in mine)
            parts.append(f"{name}: {counts}")
    return "; ".join(parts)
