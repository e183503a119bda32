"""Min-norm point of a convex hull: the simplex QP of FedLF (docs/methods/fedlf.md), via cvxopt."""

from __future__ import annotations

import numpy as np
import torch

# Tolerances for cvxopt's interior-point solver on a Gram matrix scaled to unit diagonal.
_QP_OPTIONS = {
    "show_progress": False,
    "abstol": 1e-12,
    "reltol": 1e-12,
    "feastol": 1e-12,
    "maxiters": 200,
}


def min_norm_weights(gram: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Solve ``min_lambda lambda^T P lambda  s.t.  lambda >= 0, sum(lambda) = 1``.

    ``gram`` is the m' x m' Gram matrix P = G G^T of the rows whose convex hull is searched;
    ``lambda^T G`` is then the min-norm point of that hull. Solved in float64 with cvxopt (the
    solver of the FedLF code); P is scaled to unit mean diagonal first, which leaves the argmin
    unchanged and keeps the solver's absolute tolerances meaningful. Returns (lambda as a
    float64 CPU tensor, whether cvxopt reported an optimal solution). Like the FedLF code, a
    non-optimal solution is still used; it is clipped to the simplex.
    """
    import cvxopt  # lazy: only FedLF needs it

    n = gram.shape[0]
    if gram.shape != (n, n) or n == 0:
        raise ValueError(f"gram must be a non-empty square matrix, got {tuple(gram.shape)}")
    if n == 1:
        return torch.ones(1, dtype=torch.float64), True
    p = gram.detach().to("cpu", torch.float64).numpy()
    p = 0.5 * (p + p.T)
    scale = float(np.trace(p)) / n
    if scale <= 0.0:  # every row is zero: any lambda is optimal
        return torch.full((n,), 1.0 / n, dtype=torch.float64), True
    sol = cvxopt.solvers.qp(
        cvxopt.matrix(p / scale),
        cvxopt.matrix(np.zeros(n)),
        cvxopt.matrix(-np.eye(n)),  # -lambda <= 0
        cvxopt.matrix(np.zeros(n)),
        cvxopt.matrix(np.ones((1, n))),  # 1^T lambda = 1
        cvxopt.matrix(1.0),
        options=_QP_OPTIONS,
    )
    lam = torch.from_numpy(np.array(sol["x"], dtype=np.float64).reshape(n)).clamp_min(0.0)
    return lam / lam.sum(), sol["status"] == "optimal"
