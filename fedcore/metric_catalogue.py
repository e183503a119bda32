"""Every metric name fedcore records, who emits it and what it means.

The metric reference of the docs (``docs/reference/metrics.md``) is generated from this table,
and ``tests/test_metric_catalogue.py`` checks that every metric a run emits, and every metric
name written in the code, is listed here. A name may hold one placeholder in angle brackets
(``<objective>/fallback_clients``), which matches one path segment without ``/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricDoc:
    """One metric name (or pattern), the module that emits it, its scope and its meaning."""

    name: str
    emitter: str
    scope: str
    meaning: str

    def matches(self, metric: str) -> bool:
        return _pattern(self.name).fullmatch(metric) is not None


def _pattern(name: str) -> re.Pattern[str]:
    parts = re.split(r"<[a-z_ ]+>", name)
    return re.compile("[^/]+".join(re.escape(p) for p in parts))


# Scopes: "round" (step = round 1..R of a simulation's run), "summary" (once, at the run's end),
# "sweep" / "study" / "claims" (the parent run of that command), "system" (MLflow's monitor).
SIM = "fedcore/simulation.py"
METRICS = "fedcore/metrics.py"
EVAL = "fedcore/callbacks/evaluation.py"
_M = MetricDoc

CATALOGUE: tuple[MetricDoc, ...] = (
    # every round of every run
    _M("train/loss", SIM, "round",
       "sample-weighted mean (float64) of the sampled clients' training loss over local steps"),
    _M("agg/conflict_fraction", SIM, "round",
       "share of accepted client updates with a negative dot product with the server step"),
    _M("agg/rejected_clients", SIM, "round",
       "sampled clients left out of the round: a stage rejected them (a sent vector or a "
       "scalar the rule needs was NaN or Inf, or a filter of method.stages)"),
    _M("agg/seconds", SIM, "round", "wall-clock seconds of the rule's aggregate call"),
    _M("comm/bytes_up", SIM, "round",
       "uplink bytes this round: compressed payloads, n_k (4 B) and BatchNorm statistics (fp16)"),
    _M("comm/bytes_up_total", SIM, "round", "uplink bytes since round 1"),
    _M("comm/bytes_down", SIM, "round",
       "downlink bytes this round: the model plus the rule's broadcast vectors, per sampled "
       "client"),
    _M("comm/bytes_down_total", SIM, "round", "downlink bytes since round 1"),
    # evaluated rounds (every eval_every rounds and the last)
    _M("test/accuracy", SIM, "round", "accuracy of the global model on the global test set"),
    _M("test/loss", SIM, "round", "mean cross-entropy of the global model on the global test set"),
    _M("val/accuracy", "fedcore/callbacks/evaluation.py", "round",
       "accuracy of the global model on the validation set (dataset.val_fraction of the global "
       "test split, held out of it; only when val_fraction > 0)"),
    _M("val/loss", "fedcore/callbacks/evaluation.py", "round",
       "mean cross-entropy of the global model on the validation set"),
    _M("clients/accuracy_mean", METRICS, "round",
       "mean over clients of the global model's accuracy on each client's local test split"),
    _M("clients/accuracy_std", METRICS, "round", "standard deviation of those client accuracies"),
    _M("clients/accuracy_worst10", METRICS, "round",
       "mean accuracy of the worst 10 % of clients (at least one client)"),
    _M("clients/accuracy_best10", METRICS, "round", "mean accuracy of the best 10 % of clients"),
    _M("clients/jain_index", METRICS, "round",
       "Jain's fairness index of the client accuracies, (sum a)^2 / (n sum a^2); 1 = all equal"),
    _M("unseen/accuracy", EVAL, "round",
       "with dataset.holdout_clients: mean over the held-out clients (never sampled for "
       "training) of the global model's accuracy on each one's local test split; clients/* "
       "then cover the training clients only"),
    _M("unseen/accuracy_worst10", EVAL, "round",
       "mean accuracy of the worst 10 % of held-out clients (at least one client)"),
    _M("unseen/participation_gap", EVAL, "round",
       "clients/accuracy_mean (training clients) minus unseen/accuracy: how much better the "
       "global model does on clients that could train than on clients that never did"),
    _M("personal/accuracy_mean", METRICS, "round",
       "personalised methods (Ditto): mean accuracy of the clients' personal models"),
    _M("personal/accuracy_std", METRICS, "round", "personal models: std of the accuracies"),
    _M("personal/accuracy_worst10", METRICS, "round", "personal models: worst-10 % mean"),
    _M("personal/accuracy_best10", METRICS, "round", "personal models: best-10 % mean"),
    _M("personal/jain_index", METRICS, "round", "personal models: Jain's index"),
    _M("repr/intra_class_variance", METRICS, "round",
       "mean over classes of the spread of the L2-normalised test embeddings around their "
       "class mean"),
    _M("repr/inter_class_distance", METRICS, "round",
       "mean squared distance between class means of the normalised test embeddings"),
    _M("repr/intra_inter_ratio", METRICS, "round",
       "intra_class_variance / inter_class_distance (lower: tighter, better separated classes)"),
    # summary of a run
    _M("final/accuracy", SIM, "summary", "test/accuracy at the last evaluated round"),
    _M("final/loss", SIM, "summary", "test/loss at the last evaluated round"),
    _M("final/accuracy_worst10", SIM, "summary", "clients/accuracy_worst10 at the last evaluation"),
    _M("final/accuracy_std", SIM, "summary", "clients/accuracy_std at the last evaluation"),
    _M("final/accuracy_mean_clients", SIM, "summary",
       "clients/accuracy_mean at the last evaluation"),
    _M("final/unseen_accuracy", SIM, "summary", "unseen/accuracy at the last evaluation"),
    _M("final/unseen_accuracy_worst10", SIM, "summary",
       "unseen/accuracy_worst10 at the last evaluation"),
    _M("final/participation_gap", SIM, "summary",
       "unseen/participation_gap at the last evaluation"),
    _M("final/personal_accuracy_mean", SIM, "summary",
       "personalised methods: personal/accuracy_mean at the last evaluation"),
    _M("final/personal_accuracy_worst10", SIM, "summary",
       "personalised methods: personal/accuracy_worst10 at the last evaluation"),
    _M("final/personal_accuracy_std", SIM, "summary",
       "personalised methods: personal/accuracy_std at the last evaluation"),
    _M("final/personal_jain", SIM, "summary",
       "personalised methods: personal/jain_index at the last evaluation"),
    _M("final/accuracy_last_k", SIM, "summary",
       "mean test accuracy of the last last_k evaluations (fewer if fewer were made): the "
       "default primary endpoint of a comparison family"),
    _M("auc/accuracy", SIM, "summary", "mean test accuracy over the evaluated rounds"),
    _M("auc/accuracy_trapz", SIM, "summary",
       "FedOUI's AUC: trapz(accuracy) / (R - 1) over the R evaluated rounds (R = 1: the one "
       "accuracy)"),
    _M("rounds_to_target", SIM, "summary",
       "first evaluated round whose test accuracy reached target_accuracy (absent if never)"),
    # server rules
    _M("afl/lambda_max", "fedcore/aggregators/afl.py", "round", "largest mixture weight lambda"),
    _M("afl/lambda_entropy", "fedcore/aggregators/afl.py", "round", "entropy of lambda"),
    _M("afl/effective_clients", "fedcore/aggregators/afl.py", "round",
       "1 / sum lambda^2, the number of clients lambda effectively weights"),
    _M("afl/zero_mass", "fedcore/aggregators/afl.py", "round",
       "mass of lambda on clients at the lower bound"),
    _M("afl/weighted_loss", "fedcore/aggregators/afl.py", "round",
       "lambda-weighted loss of the sampled clients"),
    _M("config/length", "fedcore/aggregators/config_rule.py", "round",
       "ConFIG's step length, the summed projection of the client pseudo-gradients"),
    _M("config/conflict_after", "fedcore/aggregators/config_rule.py", "round",
       "share of non-zero clients conflicting with ConFIG's direction"),
    _M("cos_align/cos_mean", "fedcore/aggregators/cos_align.py", "round",
       "mean cosine between client updates and their mean"),
    _M("cos_align/negative_fraction", "fedcore/aggregators/cos_align.py", "round",
       "share of clients with a negative cosine"),
    _M("cos_align/weight_max", "fedcore/aggregators/cos_align.py", "round",
       "largest client weight"),
    _M("craft/conflict_before", "fedcore/aggregators/craft.py", "round",
       "share of (client, layer group) pairs conflicting with the plain mean"),
    _M("craft/conflict_after", "fedcore/aggregators/craft.py", "round",
       "share of (client, layer group) pairs conflicting with CRAFT's step (0 by construction "
       "when the rows have full rank)"),
    _M("craft/agg_norm", "fedcore/aggregators/craft.py", "round", "norm of the aggregate g"),
    _M("crf/expected_reliability_mean", "fedcore/aggregators/crf.py", "round",
       "mean over clients of the CRF's expected reliability label"),
    _M("crf/expected_reliability_min", "fedcore/aggregators/crf.py", "round",
       "smallest expected reliability"),
    _M("crf/fallback", "fedcore/aggregators/crf.py", "round",
       "1 when every weight vanished and FedAvg weights were used"),
    _M("crf/iterations_run", "fedcore/aggregators/crf.py", "round",
       "mean-field iterations until convergence"),
    _M("fedfv/internal_projections", "fedcore/aggregators/fedfv.py", "round",
       "projections off conflicting gradients of this round's clients"),
    _M("fedfv/external_projections", "fedcore/aggregators/fedfv.py", "round",
       "projections off the recent history's conflicting gradients"),
    _M("fedfv/norm_ratio", "fedcore/aggregators/fedfv.py", "round",
       "norm of the projected mean over the norm of the plain mean, before rescaling"),
    _M("fedlf/history_rows", "fedcore/aggregators/fedlf.py", "round",
       "history gradients of recently offline clients in the QP"),
    _M("fedlf/halvings", "fedcore/aggregators/fedlf.py", "round",
       "halvings of the direction by the float guard"),
    _M("fedlf/fallback", "fedcore/aggregators/fedlf.py", "round",
       "1 when the guard fell back to the QP's direction"),
    _M("fedlf/qp_nonoptimal", "fedcore/aggregators/fedlf.py", "round",
       "layer QPs cvxopt did not solve to optimality"),
    _M("fedlf/min_cos", "fedcore/aggregators/fedlf.py", "round",
       "smallest cosine between a client pseudo-gradient and the direction"),
    _M("fednova/tau_eff", "fedcore/aggregators/fednova.py", "round",
       "tau_eff = sum p_k ||a_k||_1, the rescaling of the normalised mean"),
    _M("oui/mean", "fedcore/aggregators/fedoui.py", "round", "mean OUI of the sampled clients"),
    _M("oui/beta_a", "fedcore/aggregators/fedoui.py", "round",
       "alpha of the Beta fitted to the OUIs (NaN when no fit)"),
    _M("oui/beta_b", "fedcore/aggregators/fedoui.py", "round", "beta of the fitted Beta"),
    _M("oui/fallback", "fedcore/aggregators/fedoui.py", "round",
       "1 when the rank-percentile fallback replaced the Beta fit"),
    _M("oui/score_mean", "fedcore/aggregators/fedoui.py", "round",
       "mean typicality score s_k"),
    _M("krum/num_byzantine", "fedcore/aggregators/krum.py", "round",
       "f used this round (reduced to the largest valid f when m <= 2f + 2)"),
    _M("krum/f_reduced", "fedcore/aggregators/krum.py", "round",
       "1 when the configured num_byzantine was reduced"),
    _M("krum/selected", "fedcore/aggregators/krum.py", "round",
       "updates averaged (1 for Krum, M for Multi-Krum)"),
    _M("qfedavg/loss_mean", "fedcore/aggregators/qfedavg.py", "round",
       "mean of the clients' loss F_k on the global model"),
    _M("qfedavg/step_scale", "fedcore/aggregators/qfedavg.py", "round",
       "sum of the per-client coefficients of the step"),
    _M("qfedavg/L", "fedcore/aggregators/qfedavg.py", "round",
       "mean Lipschitz estimate L = 1 / local lr of the round"),
    _M("rfa/iterations_run", "fedcore/aggregators/rfa.py", "round",
       "smoothed Weiszfeld iterations run"),
    _M("scafcom/gamma", "fedcore/aggregators/scafcom.py", "round",
       "SCAFCOM's control-variate step size gamma"),
    _M("scafcom/c_norm", "fedcore/aggregators/scafcom.py", "round",
       "norm of the server control variate c"),
    _M("scaffold/c_norm", "fedcore/aggregators/scaffold.py", "round",
       "norm of the server control variate c"),
    _M("trimmed_mean/num_trimmed", "fedcore/aggregators/coordinate.py", "round",
       "values dropped per side and coordinate, floor(beta m)"),
    # server stages (method.stages and the built-in ones)
    _M("stages/<stage>/rejected", "fedcore/stages/base.py", "round",
       "sampled clients whose update that stage rejected this round (only in rounds where it "
       "rejected one; the round's per-client table marks them in rejected_by/<stage>)"),
    _M("median_norm/median", "fedcore/stages/norm_filter.py", "round",
       "median norm of the updates the median_norm filter judged this round"),
    # compression and error feedback
    _M("sapef/residual_norm_mean", "fedcore/stages/feedback/residual.py", "round",
       "mean norm of the sampled clients' error-feedback residuals (EF, SAEF, SA-PEF, CSER)"),
    _M("sapef/alpha", "fedcore/stages/feedback/residual.py", "round",
       "mean step-ahead coefficient alpha_r of the sampled clients"),
    _M("sapef/gradient_mismatch", "fedcore/stages/feedback/mismatch.py", "round",
       "||grad f(w) - grad f(w - alpha e)||^2 on a probe of the test set"),
    _M("cser/reset", "fedcore/stages/feedback/cser.py", "round",
       "1 in the rounds CSER sends its residual digest (every H rounds)"),
    # client objectives (summed over the sampled clients)
    _M("<objective>/fallback_clients", "fedcore/clients/_tuplets.py", "round",
       "FedQuad, QuadrupletFL, TripletFL: sampled clients with too few classes for a full "
       "tuplet, trained on a smaller one"),
    _M("<objective>/ce_only_clients", "fedcore/clients/_tuplets.py", "round",
       "tuplet objectives: sampled clients that trained on cross-entropy alone"),
    _M("<objective>/triplet_fallback_clients", "fedcore/clients/_tuplets.py", "round",
       "quadruplet objectives: sampled clients that fell back to triplets"),
    # parent runs
    _M("cells/<status>", "fedcore/tracking/parents.py", "sweep",
       "cells of the sweep by status: finished, skipped, failed"),
    _M("best/final_accuracy", "fedcore/tracking/parents.py", "sweep",
       "highest final/accuracy among the sweep's cells"),
    _M("mean/final_accuracy", "fedcore/tracking/parents.py", "sweep",
       "mean final/accuracy of the sweep's cells"),
    _M("trials/<state>", "fedcore/tuning/results.py", "study",
       "trials of the study by state: complete, pruned, fail"),
    _M("best/<metric>", "fedcore/tuning/results.py", "study",
       "best value of each objective metric of the study (also best/final_accuracy of a sweep)"),
    _M("holds/<claim id>", "fedcore/tracking/claims.py", "claims",
       "1 when the claim holds (or the implementation check passes), else 0"),
    _M("claims/seconds", "fedcore/tracking/claims.py", "claims",
       "wall-clock seconds of the claims run"),
    # MLflow's system-metrics monitor (and fedcore's torch-based GPU reader)
    _M("system/<name>", "fedcore/tracking/system_metrics.py", "system",
       "MLflow's system metrics: CPU, memory, disk, network, and on CUDA "
       "gpu_<i>_memory_usage_* (sampled every system_metrics_interval seconds)"),
)


def lookup(metric: str) -> MetricDoc | None:
    """The catalogue entry of ``metric`` (an exact name first, then a pattern); None: unknown."""
    for doc in CATALOGUE:
        if doc.name == metric:
            return doc
    for doc in CATALOGUE:
        if "<" in doc.name and doc.matches(metric):
            return doc
    return None
