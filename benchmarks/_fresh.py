"""One measure of ``benchmarks.user_overhead`` in this fresh process; prints its JSON.

Run as a script with ``PYTHONPATH`` at the checkout to time (``fedcore`` is imported from there,
so an older checkout without this file can be timed too):

    python benchmarks/_fresh.py MEASURE ROUNDS STORE_DIR

MEASURE: ``bare`` (the same SGD steps and test-set evaluations on one model), ``untracked``
(``Simulation(cfg).run()``), ``tracked`` (``run_tracked`` in this process, as a program using
fedcore as a library does, into the SQLite store in STORE_DIR, new or existing). The timed part
starts after the imports of torch and fedcore's config (what every measure needs) and includes
building the data and the model, as a user's first run does. CPU is this process's and that of
the helper processes it started and reaped (the figure helper) while timed.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import torch

TASK = ["model.name=cnn", "dataset.num_clients=20", "clients_per_round=5", "local.epochs=1",
        "local.batch_size=32", "local.lr=0.05", "eval_every=1", "seed=0", "device=cpu"]


def bare(cfg: object, rounds: int) -> None:
    """The simulation's clients, batches and plain SGD steps on one model (no ``torch.optim``,
    whose first step imports ``torch._dynamo``), and one test-set pass (and one over the
    clients' test splits) per round."""
    from fedcore.core.callbacks.evaluation import client_tests
    from fedcore.core.clients.base import minibatches
    from fedcore.core.component.seeding import derive_seed
    from fedcore.core.round.simulation import Simulation

    sim = Simulation(cfg)  # type: ignore[arg-type]
    tests = client_tests(sim.data)
    model = sim.model
    params = list(model.parameters())
    lr = sim.cfg.local.lr
    for r in range(1, rounds + 1):
        model.train()
        for cid in sim.sample_clients(r):
            data = sim.data.clients[int(cid)]
            gen = torch.Generator().manual_seed(derive_seed(sim.cfg.seed, "client", r, int(cid)))
            for idx in minibatches(data.num_train, sim.schedule(r), gen):
                loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]),
                                                         data.y_train[idx])
                grads = torch.autograd.grad(loss, params)
                with torch.no_grad():
                    torch._foreach_add_(params, grads, alpha=-lr)
        model.eval()
        with torch.no_grad():
            logits = model(sim.data.x_test)
            float((logits.argmax(1) == sim.data.y_test).float().mean())
            float(torch.nn.functional.cross_entropy(logits, sim.data.y_test))
            float((model(tests.x).argmax(1) == tests.y).float().mean())


def main() -> None:
    measure, rounds, store = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}/mlflow.db"
    os.environ["FEDCORE_ARTIFACT_LOCATION"] = f"{store}/artifacts"
    torch.set_num_threads(1)
    from fedcore.core.compose.configure import load_config

    cfg = load_config(None, [*TASK, f"rounds={rounds}"])
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, c0 = time.perf_counter(), time.process_time()
    if measure == "bare":
        bare(cfg, rounds)
    elif measure == "untracked":
        from fedcore.core.round.simulation import Simulation

        Simulation(cfg).run()
    elif measure == "tracked":
        from fedcore.tracking.runner import run_tracked

        run_tracked(cfg)
    else:
        raise SystemExit(f"unknown measure {measure!r}")
    wall = time.perf_counter() - t0
    from fedcore.tracking import figure_helper  # reaped, so that its CPU is counted

    helper = getattr(figure_helper, "_HELPER", None)
    if helper is not None:
        helper.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    helpers = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    print(json.dumps({"wall": wall, "cpu": time.process_time() - c0 + helpers}))


if __name__ == "__main__":
    main()
