"""The composition root: one experiment config (with its data, device and own model) turned
into everything the round driver owns: the recorded config, device, data, model, rule,
objective, compressor, stage chain, sampler, the config's callbacks and the engine (chosen
once) (docs/explanation/round-protocol.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from fedcore.core import aggregators, clients, compression, samplers
from fedcore.core.aggregators.base import REGISTRY as RULES
from fedcore.core.callbacks.configured import ConfiguredCallback, build_callbacks
from fedcore.core.component.seeding import GLOBAL_RNG_LOCK, derive_seed
from fedcore.core.compose.model_check import check_model, check_outputs
from fedcore.core.config.errors import ConfigError
from fedcore.core.data import hub_config
from fedcore.core.data.adversaries import choose_clients
from fedcore.core.data.federated import FederatedData, build_federated_data
from fedcore.core.data.own import config_with_data
from fedcore.core.engines.buckets import mean_steps
from fedcore.core.engines.select import build_engine
from fedcore.core.models.external import ModelArg, config_with_model, instantiate
from fedcore.core.models.layout import ParamLayout
from fedcore.core.privacy.ledger import Ledger
from fedcore.core.runtime.device_check import check_device_present
from fedcore.core.stages.attack import Attack
from fedcore.core.stages.base import REGISTRY as STAGES
from fedcore.core.stages.base import Chain, Stage
from fedcore.core.stages.feedback import build_feedback
from fedcore.core.stages.finite import NonFinite
from fedcore.core.stages.uplink import Uplink

if TYPE_CHECKING:
    from fedcore.core.aggregators.base import Aggregator
    from fedcore.core.clients.base import ClientAlgorithm
    from fedcore.core.compression.base import Compressor
    from fedcore.core.config import ExperimentConfig
    from fedcore.core.engines.select import Engine
    from fedcore.core.models import FedModel
    from fedcore.core.samplers.base import Sampler


@dataclass
class Components:
    """What one simulation is built from."""

    cfg: ExperimentConfig  # with own data or model: the config that records them
    device: torch.device
    data: FederatedData
    callbacks: list[ConfiguredCallback]  # the config's, in order
    byzantine: frozenset[int]
    client_algo: ClientAlgorithm
    model: FedModel
    layout: ParamLayout
    aggregator: Aggregator
    compressor: Compressor
    chain: Chain
    sampler: Sampler
    engine: Engine
    engine_name: str
    engine_reason: str
    privacy: Ledger | None  # privacy.mechanism central or local: the run's account


def stage_chain(cfg: ExperimentConfig, compressor: Compressor) -> Chain:
    """attack -> the config's stages (``method.stages``) -> error feedback and compression of
    every uplink vector -> the non-finite filter."""
    own: list[Stage] = [STAGES.build(spec) for spec in cfg.method.stages or []]
    feedback = build_feedback(cfg.method.compression)
    return Chain([Attack(), *own, Uplink(compressor, feedback), NonFinite()])


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when present, else cpu; a named device must exist here (ConfigError)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device_present(name)
    return torch.device(name)


def assemble(
    cfg: ExperimentConfig, data: FederatedData | None = None, device: str | None = None,
    model: ModelArg | None = None,
) -> Components:
    """Everything a run of ``cfg`` needs. ``device`` (e.g. a pinned ``cuda:1``) overrides
    ``cfg.device`` without changing the config or its hash; own ``data`` and ``model`` replace
    the config's, and the returned config records them (so its hash is theirs)."""
    if model is not None:
        cfg = config_with_model(cfg, model)
    dev = resolve_device(device or cfg.device)
    if data is None and hub_config.is_hub_name(cfg.dataset.name):  # a saved Hugging Face dataset
        data = hub_config.from_config(cfg.dataset, cfg.seed, dev)
    if data is not None:
        cfg = config_with_data(cfg, data)
    elif cfg.dataset.digest is not None:
        raise ConfigError(
            f"dataset: {cfg.dataset.name!r} is own data (digest {cfg.dataset.digest}); "
            "pass it as Simulation(cfg, data=...)"
        )
    data = data or build_federated_data(cfg.dataset, cfg.seed, dev, cfg.clients)
    return build(cfg, data, dev, model)


def build(
    cfg: ExperimentConfig, data: FederatedData, device: torch.device, model: ModelArg | None
) -> Components:
    """Every component of ``cfg`` on ``data`` and ``device``; the model is initialised from the
    run's own ``init`` seed."""
    byzantine = frozenset(
        choose_clients(data.num_clients, cfg.clients.byzantine_fraction, cfg.seed, "byzantine")
        .tolist()
    )
    client_algo = clients.build(cfg.method.client)
    with GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(cfg.seed, "init"))
        module = instantiate(cfg, model, data.in_shape, data.num_classes)
        check_model(module, cfg.model.name, client_algo, RULES.get(cfg.method.aggregator["rule"]))
        check_outputs(module, cfg.model.name, tuple(data.in_shape), data.num_classes)
        # any nn.Module; what the method calls beyond model(x) was checked just above
        fed_model = cast("FedModel", module)
        client_algo.prepare_model(fed_model)
        fed_model = fed_model.to(device)
    layout = ParamLayout.from_model(fed_model)
    privacy = privacy_ledger(cfg, data, fed_model)
    aggregator = aggregators.build(cfg.method.aggregator)
    aggregator.setup(data.num_clients, layout)
    compressor = compression.build(cfg.method.compression)
    sampler = samplers.build(cfg.method.sampler)
    local = cfg.local
    steps = mean_steps([data.clients[k].num_train for k in range(data.num_clients)],
                       local.batch_size, local.epochs, local.steps)
    engine, engine_name, engine_reason = build_engine(
        cfg, fed_model, layout, tuple(data.in_shape), device, steps
    )
    return Components(
        cfg=cfg,
        device=device,
        data=data,
        callbacks=build_callbacks(cfg.callbacks),
        byzantine=byzantine,
        client_algo=client_algo,
        model=fed_model,
        layout=layout,
        aggregator=aggregator,
        compressor=compressor,
        chain=stage_chain(cfg, compressor),
        sampler=(privacy.sampler(sampler) if privacy is not None else sampler),
        engine=engine,
        engine_name=engine_name,
        engine_reason=engine_reason,
        privacy=privacy,
    )


def privacy_ledger(cfg: ExperimentConfig, data: FederatedData,
                   model: torch.nn.Module) -> Ledger | None:
    """The run's privacy account (None: ``privacy.mechanism=none``); z calibrated here, before
    round 1, when ``privacy.target_epsilon`` is set. A model with buffers (BatchNorm running
    statistics, averaged without noise) is refused."""
    if cfg.privacy.mechanism == "none":
        return None
    if any(True for _ in model.buffers()):
        raise ConfigError(
            f"model.norm: the model {cfg.model.name} has buffers (BatchNorm statistics), which "
            f"the server averages without noise, outside privacy.mechanism="
            f"{cfg.privacy.mechanism}; allowed: a model without buffers (mlp, model.norm=group)")
    training = data.num_clients - cfg.dataset.held_out_count(data.num_clients)
    return Ledger(cfg, training, data.num_clients)
