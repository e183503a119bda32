"""The component axes: every kind of component a config names, in one table.

Each ``Axis`` says where a config names its kind's components (a dotted key, one spec or a
list of them), the kind's registry and how a spec there is resolved. Everything that walks all
of a config's components goes through ``AXES``: the config check and its requirements
(``fedcore.core.compose.configure``), where out-of-tree components come from
(``fedcore.core.compose.plugins``). Above the component packages (it imports each registry). A
new axis is one line here (and its key in the schema).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedcore.core.aggregators.base import REGISTRY as AGG
from fedcore.core.callbacks.configured import REGISTRY as CALLBACKS
from fedcore.core.clients.base import REGISTRY as CLIENTS
from fedcore.core.component.registry import Registry
from fedcore.core.compose import resolve as resolving
from fedcore.core.compression.base import REGISTRY as COMP
from fedcore.core.samplers.base import DEFAULT as DEFAULT_SAMPLER
from fedcore.core.samplers.base import REGISTRY as SAMPLERS
from fedcore.core.stages.base import REGISTRY as STAGES
from fedcore.core.stages.base import side_rank
from fedcore.core.stages.compression_spec import split
from fedcore.core.stages.feedback.base import REGISTRY as FEEDBACK

if TYPE_CHECKING:
    from fedcore.core.config import ExperimentConfig


@dataclass(frozen=True)
class Axis:
    """One component kind as a config names it.

    Attributes:
        registry: the kind's registry (its ``key`` is the name key of a spec).
        where: the dotted config key holding the spec (``method.client``, ``callbacks``).
        many: the key holds a list of specs (``None`` or ``[]``: none).
        resolve: the value at ``where`` -> its canonical form (defaults filled in); None when
            another axis resolves the mapping this kind shares.
        default: the spec in force while the config leaves ``where`` unset.
        part: this kind's keys of a mapping it shares with another kind.
        check: called with each resolved component's class and its dotted key.
        title: the kind's heading in the methods reference (empty: the registry's kind).
    """

    registry: Registry[Any]
    where: str
    many: bool = False
    resolve: resolving.Resolver | None = resolving.single
    default: dict[str, Any] | None = None
    part: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    check: Callable[[Any, str], object] | None = None
    title: str = ""

    def value(self, cfg: ExperimentConfig) -> Any:
        """What ``cfg`` holds at ``where``."""
        node: Any = cfg
        for name in self.where.split("."):
            node = getattr(node, name)
        return node

    def store(self, cfg: ExperimentConfig, value: Any) -> None:
        """Put ``value`` at ``where`` in ``cfg``."""
        *parents, last = self.where.split(".")
        node: Any = cfg
        for name in parents:
            node = getattr(node, name)
        setattr(node, last, value)

    def specs(self, cfg: ExperimentConfig) -> list[dict[str, Any]]:
        """This kind's specs in a resolved ``cfg``, in order."""
        value = self.value(cfg)
        if value is None and self.default is not None:
            value = self.default
        found = list(value or []) if self.many else ([] if value is None else [value])
        return [self.part(dict(s)) if self.part else dict(s) for s in found]

    @property
    def key(self) -> str:
        """The dotted key naming a component (``method.stages[].stage``)."""
        return f"{self.where}{'[]' if self.many else ''}.{self.registry.key}"


AXES: tuple[Axis, ...] = (
    Axis(CLIENTS, "method.client", title="Client objectives"),
    Axis(AGG, "method.aggregator", title="Server rules"),
    Axis(COMP, "method.compression", resolve=resolving.compression, part=lambda s: split(s)[0],
         title="Compressors"),
    Axis(FEEDBACK, "method.compression", resolve=None, part=lambda s: split(s)[1],
         title="Error feedback"),
    Axis(SAMPLERS, "method.sampler", resolve=resolving.sampler,
         default={SAMPLERS.key: DEFAULT_SAMPLER}, title="Client samplers"),
    Axis(STAGES, "method.stages", many=True, resolve=resolving.many, check=side_rank,
         title="Stages"),
    Axis(CALLBACKS, "callbacks", many=True, resolve=resolving.many, title="Callbacks"),
)
