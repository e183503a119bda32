"""Size limits of every input fedcore reads from a user (config, sweep, study, claims and method
files, ``KEY=VALUE`` overrides, config dicts given to the library), in one place.

Input beyond a limit is refused with one line naming the file or key
(docs/explanation/reliability.md): the limits are far above any real config and far below what
exhausts memory or the stack.
"""

from __future__ import annotations

import reprlib
from typing import Any

from fedcore.core.config.errors import ConfigError

FILE_BYTES = 1_048_576  # a YAML file (the largest shipped config is under 5 kB)
DEPTH = 32  # nested mappings/lists, in a file or in the resolved config
NODES = 100_000  # values in one document, counting each alias where it is used
ALIASES = 100  # YAML aliases (*name) in one document
STRING_CHARS = 1_000  # any string: a key, a value, a path
NAME_CHARS = 100  # a method name (it names runs and the files `fedcore tune --best` writes)
PATH_PART_BYTES = 255  # one component of a path (the file system's NAME_MAX)
SHOWN_CHARS = 80  # the most of an input value an error message repeats
# Counts a file can set (far above any real study, far below what hangs or exhausts memory):
COUNT = 1_000_000  # rounds, steps, epochs, batch size, samples and any other plain count
CLIENTS = 100_000  # dataset.num_clients, clients_per_round
SEED = 2**32 - 1  # the largest seed
SEEDS = 10_000  # seeds one sweep or study runs (a look plan's last count, a seed list)
LOOKS = 20  # looks of a seed plan
CELLS = 100_000  # cells of a sweep's grid (before duplicates are dropped)
TRIALS = 100_000  # a study's n_trials

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, SHOWN_CHARS, SHOWN_CHARS


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, at most ``SHOWN_CHARS`` characters (never the
    whole of a huge or deeply nested input)."""
    text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def clip(text: str, limit: int = 2 * SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters (a message that may quote its input)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_string(key: str, value: str, limit: int = STRING_CHARS) -> None:
    """Refuse a string longer than ``limit`` characters, naming ``key``."""
    if len(value) > limit:
        raise ConfigError(
            f"{key}: a string of {len(value):,} characters; at most {limit:,} allowed "
            f"(got {shown(value)})"
        )


def check_tree(tree: Any, where: str = "") -> None:
    """Refuse plain data (dicts, lists, strings, numbers) deeper than ``DEPTH``, with more
    than ``NODES`` values, or holding a string (key or value) over ``STRING_CHARS``;
    the error names the dotted key under ``where``. Iterative: no recursion on hostile depth."""
    stack: list[tuple[Any, str, int]] = [(tree, where, 0)]
    nodes = 0
    while stack:
        value, key, depth = stack.pop()
        nodes += 1
        if nodes > NODES:
            raise ConfigError(f"{where or 'config'}: more than {NODES:,} values")
        if isinstance(value, str):
            check_string(key or "value", value)
            continue
        if not isinstance(value, dict | list | tuple):
            continue
        if depth >= DEPTH:
            raise ConfigError(f"{key or 'config'}: nested deeper than {DEPTH} levels")
        if isinstance(value, dict):
            for k, v in value.items():
                name = str(k)
                check_string(f"key under {key or 'the top level'}", name)
                stack.append((v, f"{key}.{name}" if key else name, depth + 1))
        else:
            stack.extend((v, f"{key}[{i}]", depth + 1) for i, v in enumerate(value))


def path_problem(value: str) -> str | None:
    """What is wrong with the path ``value`` (a component over ``PATH_PART_BYTES`` bytes,
    which no file system accepts), or None."""
    for part in value.replace("\\", "/").split("/"):
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > PATH_PART_BYTES:
            return f"a path component of {size:,} bytes; at most {PATH_PART_BYTES} allowed"
    return None


def check_path(key: str, value: str) -> None:
    """Refuse a path over ``STRING_CHARS`` characters or with a component over
    ``PATH_PART_BYTES`` bytes, naming ``key``."""
    check_string(key, value)
    problem = path_problem(value)
    if problem:
        raise ConfigError(f"{key}: {problem} (got {shown(value)})")


def check_count(key: str, value: int, limit: int) -> None:
    """Refuse a count above ``limit``, naming ``key`` (one line)."""
    if value > limit:
        raise ConfigError(f"{key}: {shown(value)} is above the limit of {limit:,}; allowed: "
                          f"at most {limit:,}")
