"""Seeds derived from (experiment seed, purpose, ...) so that no stream depends on call order."""

from __future__ import annotations

import threading
import zlib

import numpy as np

# Torch's global RNG is shared by every thread of a process: sections that seed it and draw from
# it (model initialisation) hold this lock, so cells running in parallel threads stay
# bit-identical to cells run alone.
GLOBAL_RNG_LOCK = threading.RLock()

TUNING_SEED_MIN = 1000
"""Studies (configs/studies/) tune on seeds >= 1000; sweeps and claims evaluate on seeds below it,
so no hyperparameter is picked on a seed it is then evaluated on."""


def _key(part: int | str) -> int:
    return zlib.crc32(part.encode()) if isinstance(part, str) else int(part)


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed that depends only on ``parts`` (strings hashed with CRC32)."""
    state = np.random.SeedSequence([_key(p) for p in parts]).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & ((1 << 63) - 1)


def numpy_rng(*parts: int | str) -> np.random.Generator:
    """A numpy Generator for one purpose, e.g. ``numpy_rng(seed, "partition")``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_key(p) for p in parts])))
