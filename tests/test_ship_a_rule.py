"""Shipping a rule from declarations (issue 49 item 3): in a copy of the tree, a new rule's
module, its method file (with its ``docs:`` block) and its page are all it takes; the docs
generator writes the methods reference, README's table and the site's nav, and the site builds
with ``mkdocs build --strict``. No hand-kept list is edited: every other file that changes is
one the generator writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedcore.core.compose.configure import load_config
from fedcore.core.config import ConfigError
from fedcore.core.config.method_docs import MethodDocs, method_docs

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("fedcore", "configs", "docs", "scripts", "mkdocs.yml", "README.md")
GENERATED = {"README.md", "mkdocs.yml", "docs/reference/methods.md"}

RULE = '''"""FedMid: the coordinate-wise mean of the two middle deltas (a test rule)."""

from __future__ import annotations

import torch

from fedcore.core.aggregators.base import Aggregate, Aggregator, UpdateBatch, register


@register("fedmid")
class FedMid(Aggregator):
    def aggregate(self, batch: UpdateBatch) -> Aggregate:
        return Aggregate(torch.quantile(batch.deltas, 0.5, dim=0))
'''
METHOD = '''# FedMid: FedAvg clients, the coordinate-wise median on the server.
name: fedmid
docs:
  label: FedMid
  paper: Nobody et al., 2027
  page: fedmid
client: {algorithm: fedavg}
aggregator: {rule: fedmid}
compression: {compressor: none}
'''
PAGE = "# FedMid\n\nThe coordinate-wise median of the round's deltas.\n"


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for name in COPIED for p in ([root / name] if (root / name).is_file()
                                         else (root / name).rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def run(args: list[str], cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(cwd), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow  # builds the whole site (see docs/how-to/tests.md)
def test_a_new_rule_ships_with_its_page_and_no_list_edited(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, tree / name)
    run([sys.executable, "scripts/gen_docs.py"], tree)  # the copy as generated, before
    before = files(tree)
    page = Path("docs", "methods", "fedmid.md").as_posix()  # written below, not in the repo
    added = {"fedcore/core/aggregators/fedmid.py": RULE, "configs/methods/fedmid.yaml": METHOD,
             page: PAGE}
    for rel, text in added.items():
        (tree / rel).write_text(text)
    run([sys.executable, "scripts/gen_docs.py"], tree)
    run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir",
         str(tmp_path / "site")], tree)
    after = files(tree)
    changed = {p for p in after if before.get(p) != after[p]} - set(added)
    assert changed <= GENERATED, f"hand-kept files changed: {sorted(changed - GENERATED)}"
    assert "- FedMid: methods/fedmid.md" in (tree / "mkdocs.yml").read_text()
    assert "`fedmid`" in (tree / "docs" / "reference" / "methods.md").read_text()
    assert "Nobody et al., 2027" in (tree / "README.md").read_text()
    site = tmp_path / "site"
    assert (site / "methods" / "fedmid" / "index.html").is_file()
    assert 'href="../fedmid/"' in (site / "methods" / "fedavg" / "index.html").read_text()


def test_the_declaration_is_read_and_left_out_of_the_method(tmp_path: Path) -> None:
    assert method_docs("sapef_topk") == MethodDocs(
        "SA-PEF", "Redie, Arablouei, Werner, TMLR 2026", "sapef")
    assert method_docs("krum").title == "Krum, Multi-Krum"  # type: ignore[union-attr]
    (tmp_path / "methods").mkdir()
    bare = (ROOT / "configs" / "methods" / "fedavg.yaml").read_text().split("\ndocs:")[0]
    bare += "\nclient: {algorithm: fedavg}\naggregator: {rule: fedavg, server_lr: 1.0}\n"
    (tmp_path / "methods" / "plain.yaml").write_text(bare + "compression: {compressor: none}\n")
    plain = load_config(None, [f"method={tmp_path / 'methods' / 'plain.yaml'}"])
    shipped = load_config(None, ["method=fedavg"])
    assert "docs" not in shipped.resolved()["method"]
    assert plain.method.client == shipped.method.client
    assert method_docs("plain", tmp_path) is None


@pytest.mark.parametrize(("block", "error"), [
    ("docs: [FedX]", r"docs: expected a mapping of label, paper, page, title"),
    ("docs: {label: X, paper: P, page: p, pages: q}", r"docs.pages: unknown key; allowed"),
    ("docs: {label: X, paper: P}", r"docs.page: missing; required: label, paper, page"),
    ("docs: {label: X, paper: '', page: p}", r"docs.paper: expected a non-empty string"),
])
def test_a_malformed_declaration_is_one_line(tmp_path: Path, block: str, error: str) -> None:
    (tmp_path / "methods").mkdir()
    (tmp_path / "methods" / "fedx.yaml").write_text(f"name: fedx\n{block}\n")
    with pytest.raises(ConfigError, match=rf"^configs/methods/fedx.yaml: {error}"):
        method_docs("fedx", tmp_path)
