"""``fedcore run``: one simulation, with a progress bar, tracked in MLflow when installed."""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import TYPE_CHECKING

from fedcore.cli.common import EPILOG, print_table, split_args, store_helper
from fedcore.core.callbacks import Callback, RoundRecord, RoundVerdict, RunView
from fedcore.core.compose.configure import load_config

if TYPE_CHECKING:
    from fedcore.core.round.simulation import Result


class ProgressBar(Callback):
    """A tqdm bar over rounds that shows the latest test accuracy."""

    def on_run_start(self, run: RunView) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=run.cfg.rounds,
            initial=run.round,
            unit="round",
            file=sys.stderr,
            dynamic_ncols=True,
            desc=run.cfg.method.name,
        )

    def on_round_end(self, record: RoundRecord) -> RoundVerdict | None:
        metrics = record.metrics
        if "test/accuracy" in metrics:
            self.bar.set_postfix(
                acc=f"{metrics['test/accuracy']:.3f}", loss=f"{metrics['train/loss']:.3f}"
            )
        self.bar.update(1)
        return None

    def on_run_end(self, result: Result) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "bar", None) is not None:
            self.bar.close()
            self.bar = None


def cmd_run(args: argparse.Namespace) -> int:
    """Run one simulation and print its summary."""
    config, overrides = split_args(args.items)
    from fedcore.runtime_env.extras import INSTALL, missing

    tracked = not missing(("mlflow",))
    helper = store_helper() if tracked else None  # a new store's schema, made in parallel
    run_id: str | None = None
    try:
        cfg = load_config(config, overrides)
        if tracked and helper is None:  # the figures' helper (after a new store's schema)
            from fedcore.tracking import figure_helper

            figure_helper.start()
        if not tracked:
            print(f"fedcore: note: this run is not recorded (MLflow is not installed; {INSTALL} "
                  "records runs)", file=sys.stderr)
        from fedcore.core.data.federated import build_federated_data
        from fedcore.core.round.simulation import resolve_device

        data = build_federated_data(cfg.dataset, cfg.seed, resolve_device(cfg.device),
                                    cfg.clients)
        from fedcore.core.data.holdout import of_data

        of_data(cfg.dataset, cfg.seed, data)  # a holdout that takes a class out: refused here
        if cfg.checkpoint_every:
            from fedcore.core.round import checkpoint

            checkpoint.check_key(checkpoint.run_folder(cfg).parent)
        if helper is not None:
            helper.go()  # the config and the data are valid: the store may be written
        bar = ProgressBar()
        try:
            if tracked:
                from fedcore.tracking.runner import run_tracked

                run_id, result = run_tracked(cfg, callbacks=[bar], data=data)
            else:
                from fedcore.core.round.simulation import run

                result = run(cfg, callbacks=[bar], data=data)
        finally:
            bar.close()  # before any error line, so the bar does not redraw after it
    finally:
        if helper is not None:
            helper.close()
    where = "not recorded" if run_id is None else f"MLflow run {run_id}"
    print(
        f"\n{where}  method={cfg.method.name}  dataset={cfg.dataset.name}  "
        f"alpha={cfg.dataset.alpha}  seed={cfg.seed}"
    )
    if run_id is not None:
        from fedcore.tracking.settings import load_settings
        from fedcore.tracking.ui import store_line

        print(store_line(load_settings(), run_id))
    if result.stopped is not None:
        print(f"stopped early: {result.stopped} (run it again to continue)")
    if result.converged is not None:
        print(f"finished early: {result.converged}")
    print_table([{"metric": k, "value": v} for k, v in result.summary.items()], ["metric", "value"])
    return 0


def run_epilog() -> str:
    """``fedcore run --help``'s lists: config keys, shipped methods, stages, samplers and
    callbacks."""
    from fedcore.core.callbacks.configured import REGISTRY as CALLBACKS
    from fedcore.core.config import method_names
    from fedcore.core.samplers.base import REGISTRY as SAMPLERS
    from fedcore.core.stages.base import REGISTRY as STAGES

    lists = [
        ("config keys (configs/experiment.yaml; docs/reference/config.md)", config_keys()),
        ("methods (method=NAME, configs/methods/*.yaml)", method_names()),
        ("stages (method.stages='[{stage: NAME, ...}]')", STAGES.names()),
        ("samplers (method.sampler='{sampler: NAME, ...}')", SAMPLERS.names()),
        ("callbacks (callbacks='[{callback: NAME, ...}]')", CALLBACKS.names()),
    ]
    return EPILOG + "".join(
        f"\n\n{title}:\n" + textwrap.fill(", ".join(names), 88, initial_indent="  ",
                                          subsequent_indent="  ")
        for title, names in lists
    )


class RunHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``fedcore run``'s help: its epilog (the registries' names, whose modules import torch)
    is built only when the help is shown, not for every command."""

    def add_text(self, text: str | None) -> None:
        super().add_text(run_epilog() if text == EPILOG else text)


def config_keys() -> list[str]:
    """Every dotted key of the experiment config (a method's own keys as method.<part>.*)."""
    from pydantic import BaseModel

    from fedcore.core.config import RECORDED, ExperimentConfig

    def walk(model: type[BaseModel], prefix: str) -> list[str]:
        keys = []
        for name, info in model.model_fields.items():
            sub = info.annotation
            if name == "method":
                keys += ["method", "method.client.*", "method.aggregator.*",
                         "method.compression.*", "method.sampler.*", "method.stages"]
            elif isinstance(sub, type) and issubclass(sub, BaseModel):
                keys += walk(sub, f"{prefix}{name}.")
            elif f"{prefix}{name}" not in RECORDED:
                keys.append(f"{prefix}{name}")
        return keys

    return walk(ExperimentConfig, "")


def add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``run`` command's parser."""
    p_run = sub.add_parser(
        "run", help="run one simulation (defaults when no CONFIG)", epilog=EPILOG,
        formatter_class=RunHelpFormatter,
    )
    p_run.add_argument("items", nargs="*", metavar="[CONFIG] [KEY=VALUE ...]")
    p_run.set_defaults(func=cmd_run)
