"""The command fedcore prints in its hints runs fedcore the way the user ran it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fedcore.runtime_env.invocation import fedcore_command


def _console_script(root: Path) -> Path:
    script = root / ".venv" / "bin" / "fedcore"
    script.parent.mkdir(parents=True)
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom fedcore.cli import main\n"
                      "sys.exit(main())\n")
    script.chmod(0o755)
    return script


def test_console_script_not_on_path_is_printed_with_its_path(tmp_path, monkeypatch):
    script = _console_script(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "tune"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    command = fedcore_command()
    assert command == ".venv/bin/fedcore"
    done = subprocess.run(f"{command} --version", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.startswith("fedcore ")


def test_console_script_on_path_is_printed_bare(tmp_path, monkeypatch):
    script = _console_script(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "tune"])
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert fedcore_command() == "fedcore"


def test_python_dash_m_is_printed_as_python_dash_m(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main_py = Path(__file__).resolve().parent.parent / "fedcore" / "__main__.py"
    monkeypatch.setattr(sys, "argv", [str(main_py), "tune"])
    command = fedcore_command()
    assert command.endswith(" -m fedcore")
    assert command.split(" -m ")[0] == str(Path(sys.executable).absolute())
