"""Import paths in configs resolve only to the kind they name, checked before anything is
called (docs/explanation/reliability.md): ``model.name=subprocess:getoutput`` with the command
in ``model.kwargs`` ran it; a shared sweep file was a script."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from fedcore.cli import main
from fedcore.core.compose.configure import build_config, load_config
from fedcore.core.config import ConfigError
from fedcore.core.round.simulation import Simulation
from tests.conftest import TINY


def _marker_kwargs(tmp_path: Path) -> tuple[Path, str]:
    marker = tmp_path / "ran"
    return marker, f"model.kwargs={{cmd: 'touch {marker}'}}"


@pytest.mark.parametrize("target", ["subprocess:getoutput", "os:system", "builtins:eval"])
def test_a_callable_that_is_no_model_is_refused_from_the_command_line(
    capsys, tracking, tmp_path, target
):
    marker, kwargs = _marker_kwargs(tmp_path)
    argv = ["run", *TINY, f"model.name={target}", kwargs]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedcore: error: model.name: '{target}' is not an nn.Module "
                          "subclass or a model factory"), err
    assert "\n" not in err and not marker.exists()


def test_a_sweep_file_cannot_run_a_command(capsys, tracking, tmp_path):
    marker, _ = _marker_kwargs(tmp_path)
    sweep = tmp_path / "evil.yaml"
    sweep.write_text(textwrap.dedent(f"""
        name: evil
        set: {{rounds: 1, dataset.num_clients: 4, clients_per_round: 2,
               model.kwargs: {{cmd: "touch {marker}"}}}}
        grid: {{model.name: ["subprocess:getoutput"]}}
    """))
    assert main(["sweep", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.name" in err and "subprocess:getoutput" in err and "\n" not in err
    assert not marker.exists()


def test_build_config_and_the_simulation_refuse_it_before_calling(tmp_path):
    marker = tmp_path / "ran"
    spec = {"model": {"name": "subprocess:getoutput", "kwargs": {"cmd": f"touch {marker}"}},
            "rounds": 1, "dataset": {"num_clients": 4}, "clients_per_round": 2}
    with pytest.raises(ConfigError, match="^model.name: 'subprocess:getoutput' is not"):
        Simulation(build_config(spec))
    assert not marker.exists()


@pytest.fixture
def nets(tmp_path, monkeypatch):
    pkg = tmp_path / "h39nets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from pathlib import Path
        from torch import nn

        CALLED = Path(__file__).parent / "called"

        class Net(nn.Sequential):
            def __init__(self, in_shape, num_classes):
                super().__init__(nn.Flatten(), nn.Linear(64, num_classes))

        def annotated(in_shape, num_classes) -> nn.Module:
            return Net(in_shape, num_classes)

        def plain(in_shape, num_classes):
            CALLED.write_text("x")
            return Net(in_shape, num_classes)

        def says_dict(in_shape, num_classes) -> dict:
            CALLED.write_text("x")
            return {}

        class NotAModule:
            def __init__(self, **kw):
                CALLED.write_text("x")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for name in [m for m in sys.modules if m.startswith("h39nets")]:
        del sys.modules[name]


def test_module_classes_and_annotated_factories_are_the_kinds_accepted(nets):
    for name in ("h39nets:Net", "h39nets:annotated"):
        sim = Simulation(load_config(None, [*TINY, f"model.name={name}"]))
        assert sim.model is not None
    for name, why in (("h39nets:plain", "is not an nn.Module subclass or a model factory"),
                      ("h39nets:says_dict", "is not an nn.Module subclass or a model factory"),
                      ("h39nets:NotAModule", "is a class but not an nn.Module subclass")):
        with pytest.raises(ConfigError, match=f"^model.name: '{name}' {why}"):
            Simulation(load_config(None, [*TINY, f"model.name={name}"]))
    assert not (nets / "called").exists()


@pytest.mark.parametrize("key", ["method.aggregator.rule", "method.client.algorithm"])
def test_a_component_path_must_name_a_component_class(capsys, tracking, key):
    assert main(["run", *TINY, f"{key}=subprocess:getoutput"]) == 2
    err = capsys.readouterr().err.strip()
    assert "subprocess:getoutput" in err and "is not a valid" in err and "\n" not in err


class _Payload:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_load_model_never_unpickles_the_stored_model(tracking, tmp_path):
    """A replaced ``data/model.pth`` in the run's artifacts ran a marker command on
    ``load_model(run_id)``; a replaced ``global.pt`` is refused in one line."""

    import torch

    from fedcore.tracking import load_model
    from fedcore.tracking.runner import run_tracked

    run_id, _ = run_tracked(load_config(None, [*TINY, "rounds=1"]))
    (model_pth,) = (tmp_path / "artifacts").rglob("model.pth")
    marker = tmp_path / "ran"
    torch.save(_Payload(marker), model_pth)
    model = load_model(run_id)
    assert not marker.exists()
    assert isinstance(model, torch.nn.Module) and not model.training
    (global_pt,) = (tmp_path / "artifacts").rglob("global.pt")
    torch.save({"state_dict": _Payload(marker)}, global_pt)
    with pytest.raises(LookupError, match=f"^run {run_id}: extra_files/global.pt is not a plain "
                                          "weights file") as e:
        load_model(run_id)
    assert "\n" not in str(e.value) and not marker.exists()


@pytest.mark.parametrize("key", ["model.name", "method.aggregator.rule"])
def test_a_module_that_calls_sys_exit_at_import_is_one_line(capsys, tracking, tmp_path,
                                                             monkeypatch, key):
    """A plugin calling ``sys.exit()`` at import ended fedcore silently (exit code 0)."""
    (tmp_path / "h39quits.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["run", *TINY, f"{key}=h39quits:Thing"]) == 2
    finally:
        sys.modules.pop("h39quits", None)
    err = capsys.readouterr().err.strip()
    assert err == (f"fedcore: error: {key}: cannot import module 'h39quits' of "
                   "'h39quits:Thing' (SystemExit: it called sys.exit(0) while imported)"), err
