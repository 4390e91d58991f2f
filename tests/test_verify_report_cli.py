"""The report forms (rich table, JSON, inline SVG chart, HTML) and ``edgeconv verify``."""

from __future__ import annotations

import io
import json
import math
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
import typer

from converter.errors import EXIT_BAD_INPUT, EXIT_VERIFY_FAILED, EdgeconvError
from converter.ir.graph import provenance_of, to_graph, to_model
from converter.verify import Stage, onnx_runner, verify_stages
from converter.runtimes.feeds import random_inputs
from converter.verify.localize import LayerResult
from converter.verify.report import html_section, print_report, rmse_chart_svg, to_json

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def resnet(zoo_model):
    return zoo_model("resnet")


def flip_conv(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    graph = to_graph(model)
    node = next(n for n in graph.nodes if n.name == name)
    node.inputs[1] = gs.Constant(node.inputs[1].name + "_flip", -np.asarray(node.inputs[1].values))
    provenance_of(graph).record_node(name, name, "faulty_rule")
    return to_model(graph)


@pytest.fixture(scope="module")
def failing_report(resnet):
    broken = flip_conv(resnet, "conv_4")
    return verify_stages(resnet, [Stage("normalized", onnx_runner(resnet)),
                                  Stage("legalized", onnx_runner(broken), model=broken)],
                         random_inputs(resnet, seed=0))


# ------------------------------------------------------------------------------------ chart


def _rects(svg: str):
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    return root, [r for r in root.iter(f"{SVG}rect") if "layer" in r.get("class", "")]


def test_chart_has_one_bar_per_layer_and_marks_the_first(failing_report):
    layers = failing_report.stages[1].layers
    svg = rmse_chart_svg(layers.layers, layers.tolerance)
    root, bars = _rects(svg)
    assert len(bars) == len(layers.layers) == 23
    kinds = [b.get("class").split()[1] for b in bars]
    first = layers.first.index
    assert kinds[:first] == ["ok"] * first and kinds[first] == "first"
    assert set(kinds[first + 1:]) <= {"above", "ok"}
    assert "conv_4 (Conv)" in bars[first].find(f"{SVG}title").text and "faulty_rule" in bars[first].find(f"{SVG}title").text
    # Higher rMSE -> taller bar (log scale): the guilty bar is taller than every zero-error bar.
    heights = [float(b.get("height")) for b in bars]
    assert heights[first] > max(heights[:first])
    assert len(root.findall(f".//{SVG}line[@class='tolerance']")) == 1
    assert "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no network assets
    assert "<script" not in svg
    assert svg == rmse_chart_svg(layers.layers, layers.tolerance)  # deterministic


def test_chart_survives_odd_values():
    rows = [LayerResult(i, f"n{i}", "Op", f"t{i}", f"t{i}", f"n{i}", "Op", "unchanged", v, 0.0, [1], False)
            for i, v in enumerate([0.0, 1e-30, 5.0, math.inf, math.nan, 1e-4])]
    _, bars = _rects(rmse_chart_svg(rows, tolerance=1e-3))
    assert [b.get("class") for b in bars] == ["layer ok", "layer ok", "layer first", "layer above", "layer above", "layer ok"]
    assert all(float(b.get("height")) >= 0 for b in bars)
    _, none = _rects(rmse_chart_svg([], tolerance=1e-3))
    assert none == []
    _, many = _rects(rmse_chart_svg(rows * 100))  # hundreds of layers still fit the width
    assert len(many) == 600 and max(float(b.get("x")) for b in many) < 760


# ----------------------------------------------------------------------- JSON, table, HTML


def test_json_is_strict_and_names_the_layer(failing_report):
    data = to_json(failing_report)
    text = json.dumps(data, allow_nan=False)  # inf SQNR of the passing stage became "inf"
    back = json.loads(text)
    assert back["ok"] is False and back["samples"] == 1
    normalized, legalized = back["stages"]
    assert normalized["outputs"][0]["metrics"]["sqnr_db"] == "inf"
    first = legalized["layers"]["first_diverging"]
    assert (first["node"], first["op"], first["by"]) == ("conv_4", "Conv", "faulty_rule")
    assert len(legalized["layers"]["layers"]) == 23


def test_rich_table_and_html(failing_report):
    from rich.console import Console

    buf = io.StringIO()
    print_report(failing_report, Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    assert "normalized" in text and "legalized" in text and "FAIL" in text and "pass" in text
    assert "first diverging layer: conv_4 (Conv)" in text and "faulty_rule" in text
    page = html_section(failing_report)
    assert page.count("<svg") == 1  # a chart for the failing stage only
    assert "Stage legalized: per-layer normalized rMSE" in page


# -------------------------------------------------------------------------------------- CLI


def invoke(args: list[str]) -> tuple[int, str]:
    """Run ``edgeconv verify`` as converter.cli.main does: EdgeconvError -> its exit code."""
    from contextlib import redirect_stdout

    from converter.cli.commands import verify as verify_command

    app = typer.Typer()
    verify_command.register(app)

    @app.callback()
    def _root() -> None:
        """edgeconv"""

    out = io.StringIO()
    try:
        with redirect_stdout(out):
            typer.main.get_command(app).main(args=["verify", *args], prog_name="edgeconv", standalone_mode=False)
    except EdgeconvError as err:
        assert "\n" not in str(err)
        return err.exit_code, out.getvalue() + "\nERROR: " + str(err)
    return 0, out.getvalue()


@pytest.fixture(scope="module")
def files(resnet, tmp_path_factory):
    d = tmp_path_factory.mktemp("verify_cli")
    good, bad = d / "normalized.onnx", d / "broken.onnx"
    onnx.save(resnet, good)
    onnx.save(flip_conv(resnet, "conv_7"), bad)
    return d, good, bad


def test_cli_pass_writes_nothing_without_out_dir(files):
    d, good, _ = files
    before = sorted(p.name for p in d.iterdir())
    code, text = invoke([str(good), str(good), "--samples", "2"])
    assert code == 0 and "verification passed" in text
    assert sorted(p.name for p in d.iterdir()) == before


def test_cli_failure_exit_4_replay_reproduces(files, tmp_path):
    _, good, bad = files
    out = tmp_path / "out"
    code, text = invoke([str(good), str(bad), "-o", str(out), "--json", "--seed", "7", "--range", "0:1"])
    assert code == EXIT_VERIFY_FAILED
    report = json.loads(text.split("\nERROR: ")[0])
    first = report["stages"][0]["layers"]["first_diverging"]
    assert (first["node"], first["by"]) == ("conv_7", "faulty_rule")
    assert "conv_7" in text.split("\nERROR: ")[1]
    assert sorted(p.name for p in out.iterdir() if p.name != ".edgeconv-output") == ["reproduce.sh", "verify-inputs.npz", "verify.html", "verify.json"]
    assert "<svg" in (out / "verify.html").read_text()
    assert json.loads((out / "verify.json").read_text()) == report
    npz = (out / "verify-inputs.npz").read_bytes()
    with np.load(out / "verify-inputs.npz") as data:
        assert 0.0 <= data["input"].min() and data["input"].max() < 1.0  # the --range was used

    command = shlex.split(report["replay"]["command"])
    assert command[:2] == ["edgeconv", "verify"] and (out / "reproduce.sh").read_text().endswith(report["replay"]["command"] + "\n")
    again = tmp_path / "again"
    code2, text2 = invoke(command[2:] + ["-o", str(again), "--json"])
    assert code2 == EXIT_VERIFY_FAILED
    replayed = json.loads(text2.split("\nERROR: ")[0])
    assert replayed["stages"][0]["outputs"] == report["stages"][0]["outputs"]  # same numbers
    assert (again / "verify-inputs.npz").read_bytes() == npz  # byte-identical inputs


def test_cli_default_replay_dir_next_to_converted(files):
    d, good, bad = files
    code, _ = invoke([str(good), str(bad)])
    assert code == EXIT_VERIFY_FAILED
    out = d / "broken.verify"
    names = ["reproduce.sh", "verify-inputs.npz", "verify.html", "verify.json"]
    assert sorted(p.name for p in out.iterdir() if p.name != ".edgeconv-output") == names
    first = {n: (out / n).read_bytes() for n in names}
    assert invoke([str(good), str(bad)])[0] == EXIT_VERIFY_FAILED
    assert {n: (out / n).read_bytes() for n in names} == first  # byte-identical on a rerun


def test_cli_localizes_against_the_raw_original(files, zoo_onnx_path):
    """The raw torch export has other tensor names; verify normalizes it to find the layers."""
    _, _, bad = files
    code, text = invoke([str(zoo_onnx_path("resnet")), str(bad), "--json", "-o", str(bad.parent / "raw")])
    assert code == EXIT_VERIFY_FAILED
    first = json.loads(text.split("\nERROR: ")[0])["stages"][0]["layers"]["first_diverging"]
    assert first["node"] == "conv_7"


@pytest.mark.parametrize("extra, message", [
    (["--inputs", "{d}/missing.npz"], "no such file"),
    (["--inputs", "{d}/wrong.npz"], "no array for model input(s) input"),
    (["--tolerances", "{d}/bad.yaml"], "unknown key(s) atoll"),
    (["--range", "input=1:0"], "range 'input=1:0': expected"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(files, tmp_path, extra, message):
    d, good, bad = files
    np.savez(tmp_path / "wrong.npz", x=np.zeros((1, 3, 32, 32), np.float32))
    (tmp_path / "bad.yaml").write_text("atoll: 1\n")
    out = tmp_path / "out"
    code, text = invoke([str(good), str(bad), "-o", str(out)] + [a.format(d=tmp_path) for a in extra])
    assert code == EXIT_BAD_INPUT and message in text
    assert not out.exists()


def test_cli_missing_model_file(files, tmp_path):
    _, good, _ = files
    code, text = invoke([str(good), str(tmp_path / "nope.onnx")])
    assert code == EXIT_BAD_INPUT and "nope.onnx: no such file" in text


def test_command_module_imports_light():
    code = ("import sys, typer; from converter.cli.commands import verify; app = typer.Typer(); verify.register(app); "
            "heavy = [m for m in ('onnx', 'numpy', 'torch', 'onnxruntime', 'rich') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
