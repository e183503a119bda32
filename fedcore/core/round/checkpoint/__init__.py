"""Checkpoint files: plain containers of tensors written atomically, read with weights_only=True.

A checkpoint is a ``torch.save`` of dicts, lists, tuples, str/int/float/bool/None and tensors
only; numpy arrays and scalars are stored as tensors tagged ``{"__numpy__": tensor}`` (or plain
Python numbers) and turned back on load. Loading uses ``torch.load(weights_only=True)``, which
executes no code from the file.

Every file records the code digest of the process that wrote it (``code_digest``,
``fedcore.core.round.code_digest``); ``latest`` resumes only a checkpoint of this code and
deletes those of other code, so one run never mixes two versions of the code.

Every file also carries ``hmac``, an HMAC-SHA256 over everything else in it (``digest``)
under a key the user controls (``key_for``: ``FEDCORE_CHECKPOINT_KEY``, else a random key
file ``checkpoint.key``, mode 0600, in ``checkpoint_dir``; ``check_key`` refuses a key file
that is not a regular 0600 file of this user holding a key of the right length), checked on
load whatever code wrote the file: a file unsigned, edited, corrupted or forged (its digest
recomputed) by someone without the key is refused, naming the file. Anyone who can read the key
can forge a checkpoint.
``check_state`` refuses a state inconsistent with the run it would resume (a round beyond
its ``rounds``, a history or per-client tables that do not match the round, parameters or
buffers of another shape).
"""

from __future__ import annotations

from fedcore.core.round.checkpoint.codec import decode as decode
from fedcore.core.round.checkpoint.codec import encode as encode
from fedcore.core.round.checkpoint.errors import ORIGIN as ORIGIN
from fedcore.core.round.checkpoint.errors import CheckpointError as CheckpointError
from fedcore.core.round.checkpoint.errors import unusable as unusable
from fedcore.core.round.checkpoint.files import FORMAT as FORMAT
from fedcore.core.round.checkpoint.files import KEEP as KEEP
from fedcore.core.round.checkpoint.files import check_state as check_state
from fedcore.core.round.checkpoint.files import checkpoint_files as checkpoint_files
from fedcore.core.round.checkpoint.files import latest as latest
from fedcore.core.round.checkpoint.files import load as load
from fedcore.core.round.checkpoint.files import prune as prune
from fedcore.core.round.checkpoint.files import remove as remove
from fedcore.core.round.checkpoint.files import run_folder as run_folder
from fedcore.core.round.checkpoint.files import same_code as same_code
from fedcore.core.round.checkpoint.files import save as save
from fedcore.core.round.checkpoint.rng import rng_state as rng_state
from fedcore.core.round.checkpoint.rng import set_rng_state as set_rng_state
from fedcore.core.round.checkpoint.signing import KEY_BYTES as KEY_BYTES
from fedcore.core.round.checkpoint.signing import KEY_ENV as KEY_ENV
from fedcore.core.round.checkpoint.signing import KEY_FILE as KEY_FILE
from fedcore.core.round.checkpoint.signing import KEY_HEX as KEY_HEX
from fedcore.core.round.checkpoint.signing import MAC as MAC
from fedcore.core.round.checkpoint.signing import check_key as check_key
from fedcore.core.round.checkpoint.signing import digest as digest
from fedcore.core.round.checkpoint.signing import key_for as key_for
