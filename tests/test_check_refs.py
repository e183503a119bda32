"""scripts/check_refs.py: every cross-reference to fedcore's API resolves, and a moved class
fails it with the file and line (run-tests.sh runs it before everything slow)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_refs.py"


def _check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True,
                          text=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    for folder in ("fedcore", "flows", "docs"):
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.png", "assets"))
    return tmp_path


def test_every_reference_in_this_tree_resolves():
    done = _check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_moving_a_referenced_class_fails_naming_file_and_line(tmp_path):
    root = _copy(tmp_path)
    records = root / "fedcore" / "core" / "records" / "__init__.py"
    records.write_text(records.read_text().replace("class ClientUpdate:", "class ClientReply:"))
    done = _check(root)
    assert done.returncode == 1
    template = (ROOT / "fedcore/core/clients/template.py").read_text().splitlines()
    line = next(i for i, text in enumerate(template, 1)
                if "[fedcore.core.records.ClientUpdate]" in text)
    assert (f"fedcore/core/clients/template.py:{line}: `fedcore.core.records.ClientUpdate` "
            "does not exist") in done.stdout


def test_a_reference_to_an_object_no_page_renders_fails(tmp_path):
    root = _copy(tmp_path)
    page = root / "docs" / "how-to" / "docs.md"
    page.write_text(page.read_text() + "\nSee [`load`][fedcore.core.round.checkpoint.load].\n")
    done = _check(root)
    assert done.returncode == 1
    assert "docs/how-to/docs.md:" in done.stdout
    assert "no `:::` directive in docs/ renders it" in done.stdout


def test_the_bare_form_is_checked_too(tmp_path):
    root = _copy(tmp_path)
    page = root / "docs" / "how-to" / "docs.md"
    page.write_text(page.read_text() + "\nSee [fedcore.api.no_such_function][].\n")
    done = _check(root)
    assert "`fedcore.api.no_such_function` does not exist" in done.stdout


def test_references_shown_as_code_are_not_checked(tmp_path):
    root = _copy(tmp_path)
    page = root / "docs" / "how-to" / "docs.md"
    page.write_text(page.read_text() + "\nWrite `` [`X`][fedcore.no.such] `` for a link.\n\n"
                    "```markdown\n[`Y`][fedcore.no.other]\n```\n")
    assert _check(root).returncode == 0
    page.write_text(page.read_text() + "\nBut [`Z`][fedcore.no.third] is one.\n")
    done = _check(root)
    assert done.returncode == 1 and "fedcore.no.third" in done.stdout
    assert "fedcore.no.such" not in done.stdout and "fedcore.no.other" not in done.stdout
