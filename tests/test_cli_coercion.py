"""Option values that already have their type skip typer's Pydantic validation
(converter/cli/commands/coercion.py); everything else is still typer's, errors included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from converter.cli import app, main
from converter.cli.commands import coercion

ROOT = Path(__file__).resolve().parents[1]


class _Info:
    def __init__(self, min=None, max=None, parser=None):
        self.min, self.max, self.parser, self.click_type = min, max, parser, None


@pytest.mark.parametrize("annotation, info, value, expected", [
    (str, _Info(), "x.onnx", "x.onnx"),
    (bool, _Info(), True, True),
    (int, _Info(min=1), 1, 1),
    (int, _Info(min=1), 4, 4),
    (float, _Info(min=0), 0.5, 0.5),
    (list[str], _Info(), ("Conv", "Gemm"), ["Conv", "Gemm"]),
    (list[str], _Info(), (), []),
])
def test_plain_values_pass_unchanged(annotation, info, value, expected):
    got = coercion._plain_value(annotation, info, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("annotation, info, value", [
    (int, _Info(), "3"),            # text: typer converts
    (int, _Info(min=1), 0),         # out of range: typer says why
    (int, _Info(), True),           # a bool is not an int here
    (float, _Info(), 1),            # an int for a float: typer converts
    (float, _Info(max=1.0), 2.0),
    (str, _Info(parser=str.upper), "x"),  # a custom parser always runs
    (list[str], _Info(), ("a", 1)),
    (dict, _Info(), {}),
])
def test_other_values_go_to_typer(annotation, info, value):
    assert coercion._plain_value(annotation, info, value) is coercion._NOT_PLAIN


def _params(*argv: str) -> dict:
    assert coercion.install()
    command = typer.main.get_command(app)
    sub = command.commands["port"]
    ctx = sub.make_context("port", list(argv), parent=command.make_context("edgeconv", ["port"]))
    return ctx.params


def test_port_values_with_and_without_typer_coercion(tmp_path):
    params = _params("m.onnx", "--to", "tflite", "--hw", "cpu", "-j", "2", "--atol", "0.25",
                     "--custom-op", "Conv", "--custom-op", "Gemm", "--no-verify")
    assert params["to"] == "tflite" and params["hw"] == "cpu" and params["no_verify"] is True
    assert params["jobs"] == 2 and type(params["jobs"]) is int          # text -> typer's int
    assert params["atol"] == 0.25 and type(params["atol"]) is float     # text -> typer's float
    assert params["custom_op"] == ["Conv", "Gemm"]
    defaults = _params("m.onnx", "--to", "tflite")
    assert defaults["jobs"] == 1 and defaults["seed"] == 0 and defaults["atol"] is None
    assert defaults["custom_op"] == () and defaults["no_verify"] is False


@pytest.mark.parametrize("argv, message", [
    (["-j", "0"], "Invalid value for '-j' / '--jobs': Input should be greater than or equal to 1"),
    (["-j", "abc"], "Invalid value for '-j' / '--jobs': Input should be a valid integer"),
    (["--atol", "x"], "Invalid value for '--atol': Input should be a valid number"),
])
def test_bad_values_get_typers_errors(argv, message, capsys, tmp_path):
    code = main(["port", str(tmp_path / "m.onnx"), "--to", "tflite", *argv, "-o", str(tmp_path / "o")])
    assert code == 2
    assert message in capsys.readouterr().err


def test_parsing_a_port_imports_no_pydantic(tmp_path):
    driver = ("import sys, typer; from converter.cli import app; from converter.cli.commands import coercion; "
              "coercion.install(); c = typer.main.get_command(app); "
              "c.commands['port'].make_context('port', ['m.onnx', '--to', 'tflite', '--hw', 'cpu', '--no-verify', "
              "'-o', 'out'], parent=c.make_context('edgeconv', ['port'])); "
              "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic')))")
    done = subprocess.run([sys.executable, "-c", "import json; " + driver], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
