"""The privacy accountant: epsilon(delta) of a number of rounds of a mechanism, and the noise
multiplier that meets a target epsilon, both computed by Google's ``dp-accounting`` (imported
here, when a private run starts).

A round of central DP-FedAvg is a subsampled Gaussian mechanism on the sum of clipped client
deltas: Poisson sampling with rate q (add-or-remove-one neighbours, sensitivity C, noise
multiplier z) or sampling ``m`` of ``N`` without replacement (replace-one neighbours: the sum
moves by up to 2C, so the accountant sees z / 2). Local DP (the ``clip_noise`` stage) is a
Gaussian mechanism per client release, replace-one within a client's data (sensitivity 2C:
z / 2), composed over the rounds a client took part in, without amplification by sampling (the
server knows who sent)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

# Integer Renyi orders: fractional ones (below 2) cost 100 times more per evaluation in
# dp-accounting and are rarely optimal for the noise levels of federated training.
RDP_ORDERS = tuple(range(2, 65)) + (128, 256, 512, 1024)

Sampling = Literal["poisson", "fixed", "local"]
# The PLD accountant's loss grid grows as 1/z^2 (z = 0.1: 15 s and 1 GB per epsilon); below this
# z epsilon is far beyond any useful budget anyway, and the RDP accountant is fast there.
PLD_MIN_NOISE = 0.5  # of the accounted noise multiplier


@dataclass(frozen=True)
class Account:
    """What one round of the mechanism is, for the accountant.

    Attributes:
        accountant: ``rdp`` or ``pld``.
        sampling: ``poisson`` or ``fixed`` (central DP), ``local`` (per-client releases).
        noise_multiplier: z, the noise std over the clip C.
        num_clients: N, the training clients (those a round may sample).
        per_round: m, clients_per_round (Poisson: the expected number, q = m / N).
    """

    accountant: str
    sampling: Sampling
    noise_multiplier: float
    num_clients: int
    per_round: int

    @property
    def rate(self) -> float:
        """q = m / N (1 for local DP: each release is a client's own)."""
        return 1.0 if self.sampling == "local" else self.per_round / self.num_clients

    @property
    def accounted_noise(self) -> float:
        """The noise multiplier the accountant sees: z, or z / 2 under replace-one neighbours
        (fixed-size sampling, local DP), whose sensitivity is 2C."""
        return self.noise_multiplier if self.sampling == "poisson" else self.noise_multiplier / 2

    def with_noise(self, noise_multiplier: float) -> Account:
        return Account(self.accountant, self.sampling, noise_multiplier, self.num_clients,
                       self.per_round)


def default_delta(num_clients: int) -> float:
    """delta = 1 / N^1.1: below 1/N, so that no mechanism releasing one client's data whole
    meets it."""
    return float(num_clients ** -1.1)


def dp_event(account: Account, rounds: int) -> Any:
    """The dp-accounting event of ``rounds`` rounds of ``account``'s mechanism."""
    import dp_accounting as dpa

    gaussian = dpa.GaussianDpEvent(account.accounted_noise)
    if account.sampling == "poisson":
        one = dpa.PoissonSampledDpEvent(account.rate, gaussian)
    elif account.sampling == "fixed":
        one = dpa.SampledWithoutReplacementDpEvent(account.num_clients, account.per_round,
                                                   gaussian)
    else:
        one = gaussian
    return dpa.SelfComposedDpEvent(one, rounds)


def fresh_accountant(account: Account) -> Any:
    """An empty dp-accounting accountant of ``account``'s kind and neighbouring relation."""
    import dp_accounting as dpa
    from dp_accounting import pld, rdp

    relation = (dpa.NeighboringRelation.REPLACE_ONE if account.sampling == "fixed"
                else dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    if account.accountant == "pld":
        return pld.PLDAccountant(relation)
    return rdp.RdpAccountant(list(RDP_ORDERS), relation)


def epsilon(account: Account, rounds: int, delta: float) -> float:
    """epsilon at ``delta`` after ``rounds`` rounds (0 before any; inf without noise)."""
    if rounds <= 0:
        return 0.0
    if account.noise_multiplier == 0:
        return math.inf
    return float(fresh_accountant(account).compose(dp_event(account, rounds))
                 .get_epsilon(delta))


def calibrate(account: Account, rounds: int, target: float, delta: float) -> float:
    """The smallest noise multiplier (to dp-accounting's tolerance, 1e-6) whose epsilon after
    ``rounds`` rounds is at most ``target``: dp-accounting's ``calibrate_dp_mechanism``.

    PLD searches between half the RDP answer (at least ``PLD_MIN_NOISE``) and the RDP answer
    (PLD's epsilon is the tighter, so its z is the smaller), never where its grid explodes; a
    target met at ``PLD_MIN_NOISE`` already returns that floor."""
    import dp_accounting as dpa

    def search(acc: Account, bracket: Any) -> float:
        return float(dpa.calibrate_dp_mechanism(
            lambda: fresh_accountant(acc), lambda z: dp_event(acc.with_noise(z), rounds),
            target, delta, bracket))

    rdp_account = Account("rdp", account.sampling, 0.0, account.num_clients, account.per_round)
    z_rdp = search(rdp_account, dpa.LowerEndpointAndGuess(1e-3, 1.0))
    if account.accountant == "rdp":
        return z_rdp
    low, high = max(PLD_MIN_NOISE, z_rdp / 2), max(PLD_MIN_NOISE, z_rdp)
    if epsilon(account.with_noise(low), rounds, delta) <= target:
        return low
    while epsilon(account.with_noise(high), rounds, delta) > target:
        high *= 1.5
    return search(account, dpa.ExplicitBracketInterval(low, high))
