"""The shared base of every component kind (client objective, rule, compressor, error
feedback, sampler, stage, configured callback): a registered ``name``, validated ``HParams``
held as ``hp``, what it ``requirements`` of the rest of the config, the callbacks it
contributes to a run, and the state a checkpoint holds. Each kind's base class subclasses it
and adds its own hooks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from fedcore.core.component.registry import HParams
from fedcore.core.component.registry import HParams as AnyHParams

if TYPE_CHECKING:
    from fedcore.core.component.requirements import Need


class Component:
    """``name``, ``HParams`` and ``hp``; every hook below does nothing unless overridden."""

    name: ClassVar[str]
    HParams: ClassVar[type[HParams]] = HParams
    hp: Any

    def __init__(self, hparams: AnyHParams | None = None) -> None:
        self.hp = hparams if hparams is not None else self.HParams()

    @classmethod
    def requirements(cls, hp: Any) -> list[Need]:
        """What this component needs from the rest of the config
        (``fedcore.core.component.requirements``), checked when the config is loaded;
        it sees only its own hyper-parameters."""
        return []

    def callbacks(self) -> list[Any]:
        """Callbacks this component adds to a run (``fedcore.core.callbacks.Callback`` objects)."""
        return []

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs of this component."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``."""
