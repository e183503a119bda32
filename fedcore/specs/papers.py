"""Each shipped method's name as its paper writes it, the paper, and its page in docs/methods:
what each file of configs/methods declares in its ``docs:`` block
(``fedcore.core.config.method_docs``).

The LaTeX tables print ``SA-PEF`` where the configs say ``sapef_topk``; ``scripts/gen_docs.py``
lists the papers in the generated pages from the same declarations.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from fedcore.core.config import config_dir, method_names
from fedcore.core.config.method_docs import method_docs


class MethodPaper(NamedTuple):
    """A shipped method (a file of configs/methods): its display name, its paper and the page
    of docs/methods that explains it."""

    name: str
    paper: str
    page: str


@functools.cache
def _methods(folder: str) -> dict[str, MethodPaper]:
    out = {}
    for name in method_names():
        docs = method_docs(name)
        if docs is not None:
            out[name] = MethodPaper(docs.label, docs.paper, docs.page)
    return out


def methods() -> dict[str, MethodPaper]:
    """The shipped methods that declare their paper, by name (read once per configs folder)."""
    return _methods(str(config_dir()))


def display_name(row: str) -> str:
    """A row label with its method as the paper writes it: ``sapef_topk`` -> ``SA-PEF``,
    ``craft (tuned)`` -> ``CRAFT (tuned)``, ``fedavg lr=0.1`` -> ``FedAvg lr=0.1``; a method
    that is not shipped (a plugin's) keeps its name."""
    method, sep, rest = str(row).partition(" ")
    known = methods().get(method)
    return (known.name if known else method) + sep + rest
