"""``edgeconv split``: the zoo detector for a target whose matrix lacks Softmax (MACE cpu)."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest
import typer

from converter.demo import zoo
from converter.errors import Unsupported
from test_postproc_harness import load_postprocess, max_abs_diff, run_onnx


def invoke(args: list[str]):
    from converter.cli.commands import split as split_command

    app = typer.Typer()
    split_command.register(app)

    @app.callback()
    def _root() -> None:  # keep "split" a subcommand
        pass

    return typer.main.get_command(app).main(args=["split", *args], prog_name="edgeconv", standalone_mode=False)


@pytest.fixture(scope="module")
def detector_path(tmp_path_factory):
    return zoo.export_onnx("detector", tmp_path_factory.mktemp("cli") / "detector.onnx")


def test_split_command_output_is_legal_and_equals_original(detector_path, tmp_path, capsys):
    from converter.legalize.check import check_model
    from converter.frontend.normalize import normalize

    invoke([str(detector_path), "--to", "mace", "--hw", "cpu", "-o", str(tmp_path / "out"), "--max-outputs", "1"])
    printed = capsys.readouterr().out
    assert "moved 2 node(s) to post-processing: softmax_0, mul_0" in printed
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert files == [".edgeconv-output", "model.onnx", "postproc/manifest.json", "postproc/postprocess.hpp", "postproc/postprocess.py"]

    cut = onnx.load(tmp_path / "out" / "model.onnx")
    assert check_model(cut, "mace", "cpu").ok
    assert [o.name for o in cut.graph.output] == ["edgeconv_merged"]

    feeds = zoo.example_inputs("detector", seed=11)
    original = run_onnx(normalize(onnx.load(detector_path)), feeds)
    module = load_postprocess(tmp_path / "out" / "postproc" / "postprocess.py", "pp_cli")
    restored = module.postprocess(run_onnx(cut, feeds))
    for name, want in original.items():
        assert max_abs_diff(restored[name], want) <= 1e-5, name


def test_split_command_refuses_with_one_line_and_writes_nothing(detector_path, tmp_path):
    with pytest.raises(Unsupported) as err:
        invoke([str(detector_path), "--to", "mace", "--hw", "cpu", "-o", str(tmp_path / "out"), "--move", "conv_4"])
    assert "'conv_4' (Conv)" in str(err.value)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_command_module_imports_light():
    code = ("import sys, converter.cli.commands.split as s; "
            "heavy = [m for m in ('onnx', 'numpy', 'torch', 'onnx_graphsurgeon') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
