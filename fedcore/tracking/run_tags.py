"""What a run is tagged and logged with: the flattened config, the writing process, the
setting's tags."""

from __future__ import annotations

import os
import socket
from typing import Any

import yaml

from fedcore.specs.hparams import regime_tags


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}; lists become their YAML flow form."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = (
                value
                if isinstance(value, str)
                else yaml.safe_dump(value, default_flow_style=True)
                .strip()
                .removesuffix("...")
                .strip()
            )
    return out


def owner_tags() -> dict[str, str]:
    """Which process is writing a run (to tell a live run from one whose process died)."""
    return {"fedcore.host": socket.gethostname(), "fedcore.pid": str(os.getpid())}


def run_tags(resolved: dict[str, Any], config_hash: str) -> dict[str, str]:
    """The tags that find a run: method, dataset, setting, seed, config hash and the
    misbehaving clients' settings."""
    behaviour = resolved.get("clients", {})
    misbehaving = {
        f"clients.{k}": str(behaviour[k])
        for k in ("noisy_fraction", "noise_rate")
        if behaviour.get("noisy_fraction", 0) > 0
    }
    if behaviour.get("byzantine_fraction", 0) > 0:
        misbehaving.update(
            {
                f"clients.{k}": str(behaviour[k])
                for k in ("byzantine_fraction", "attack", "attack_strength")
            }
        )
    return {
        **misbehaving,
        "method": str(resolved["method"]["name"]),
        "dataset": str(resolved["dataset"]["name"]),
        "alpha": str(resolved["dataset"]["alpha"]),
        "partition": str(resolved["dataset"]["partition"]),
        "seed": str(resolved["seed"]),
        "config_hash": config_hash,
        **regime_tags(resolved),
    }
