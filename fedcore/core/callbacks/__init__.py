"""Callbacks of the round loop: the protocol (`fedcore.core.callbacks.base`) and the built-in
callbacks (evaluation, summary, divergence guard, checkpoint) in their own modules.

Light on purpose (no torch import) so that the CLI's progress bar can subclass ``Callback`` at
start-up; the built-ins are imported from their modules.
"""

from fedcore.core.callbacks.base import Callback, RoundRecord, RoundVerdict, RunView

__all__ = ["Callback", "RoundRecord", "RoundVerdict", "RunView"]
