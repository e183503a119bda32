"""``fedcore ui``: the MLflow UI on the project's store."""

from __future__ import annotations

import argparse


def cmd_ui(args: argparse.Namespace) -> int:
    """Serve the MLflow UI (or print the link to a server's)."""
    from fedcore.tracking.ui import ui_command

    return ui_command(args.host, args.port)


def add_ui(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``ui`` command's parser."""
    p_ui = sub.add_parser(
        "ui", help="the MLflow UI on this project's store (prints the training-view link)",
        description="Serve the MLflow store of mlflow.yml (or MLFLOW_TRACKING_URI) with "
        "`mlflow ui` until Ctrl-C, and print the link that opens the runs in MLflow's training "
        "view. With an MLflow server as tracking URI, only print the link.",
    )
    p_ui.add_argument("--host", default=None,
                      help="address to listen on (default: ui_url's in mlflow.yml, 127.0.0.1)")
    p_ui.add_argument("--port", type=int, default=None,
                      help="port (default: ui_url's in mlflow.yml, 5000)")
    p_ui.set_defaults(func=cmd_ui)
