"""Execution engines of the round loop: how the sampled clients' local training is run.

``sequential``: one client after the other (any objective, any model). ``vectorised``: all
clients of a chunk at once with ``torch.func`` (fedcore/core/engines/vectorised.py), bucketed by
their step counts (fedcore/core/engines/buckets.py). The choice and
its reason are made once, by the composition root (``fedcore.core.compose.assembly`` calls
``fedcore.core.engines.select.build_engine``).
"""
