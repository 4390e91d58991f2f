"""Import laziness: a command imports only the heavy libraries its inputs and target need.

Each case runs ``edgeconv`` in a fresh interpreter (``converter.cli.main``, as the console script
does) and lists the heavy top-level packages left in ``sys.modules``.  Not a timing test: it
asserts *which* modules load, the cause of most of a cold port's seconds (TensorFlow ~2 s,
torch ~1.5 s, coremltools' frontends ~4 s on the shared CI machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "torch", "coremltools", "onnxruntime", "onnx", "numpy", "ai_edge_litert", "tf2onnx",
         "sympy", "keras")

_DRIVER = """
import contextlib, io, json, os, sys
from converter.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = main(sys.argv[2:])
    except SystemExit as exit:
        code = exit.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1].split(',')))
threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None
print(json.dumps({"code": code, "heavy": heavy, "threads": threads}))
"""


def _run(*argv: str, heavy=HEAVY, write_caches: bool = False) -> dict:
    # as for a user: numpy's BLAS threads and rich's terminal detection left to their defaults
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_THREAD_VARIABLES + _RICH_VARIABLES}
    env["PYTHONPATH"] = str(ROOT)
    if write_caches:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", _DRIVER, ",".join(heavy), *argv], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _imports(*argv: str, heavy=HEAVY, write_caches: bool = False) -> tuple[int, set[str]]:
    result = _run(*argv, heavy=heavy, write_caches=write_caches)
    return result["code"], set(result["heavy"])


#: What OpenBLAS reads for its thread count (converter/infra/blas.py): unset, as for a user.
_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
#: What makes rich treat a pipe as a terminal (converter/cli/commands/plain_table.py).
_RICH_VARIABLES = ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS")


def test_help_imports_no_heavy_library():
    code, heavy = _imports("--help")
    assert code == 0 and heavy == set()


def test_port_onnx_to_tflite_imports_neither_torch_tensorflow_nor_coremltools(zoo_onnx_path, tmp_path):
    code, heavy = _imports("port", str(zoo_onnx_path("resnet")), "--to", "tflite", "--hw", "cpu",
                           "-o", str(tmp_path / "out"), "--json")
    assert code == 0
    assert heavy & {"torch", "tensorflow", "coremltools", "tf2onnx", "keras"} == set()
    # What it does need: onnx, onnxruntime (reference) and LiteRT (the file's own runtime).
    assert {"onnx", "onnxruntime", "ai_edge_litert"} <= heavy


def test_port_no_verify_imports_only_what_the_file_needs(zoo_onnx_path, tmp_path):
    """``--no-verify``: no reference run (onnxruntime) and no file run (LiteRT); typer's values
    are taken without Pydantic (commands/coercion.py) and the matrix from its parse cache, once
    a process has written it (matrix/compiled.py), so neither Pydantic nor PyYAML loads; the
    summary on a pipe is written without rich (commands/plain_table.py), as ``--json`` is."""
    argv = ("port", str(zoo_onnx_path("normalized_input")), "--to", "tflite", "--hw", "cpu", "--no-verify",
            "-o", str(tmp_path / "out"))
    extra = ("pydantic", "yaml", "jinja2", "rich")
    code, _ = _imports(*argv, heavy=HEAVY + extra, write_caches=True)  # writes the matrix cache
    assert code == 0
    code, heavy = _imports(*argv, heavy=HEAVY + extra)
    assert code == 0
    assert heavy == {"onnx", "numpy"}


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; numpy's BLAS starts none on one core")
def test_port_no_verify_leaves_no_thread_behind(zoo_onnx_path, tmp_path):
    """A port that runs no model imports numpy without OpenBLAS's thread pool (converter/infra/blas.py:
    one worker per core, started at import), and the threads that hash the input and sync the
    outputs in the background are done when it returns: one thread, the main one.  A port that
    verifies keeps numpy's threads (the check that the count sees them)."""
    common = (str(zoo_onnx_path("normalized_input")), "--to", "tflite", "--hw", "cpu", "--json")
    result = _run("port", *common, "--no-verify", "-o", str(tmp_path / "out"))
    assert result["code"] == 0 and result["threads"] == 1
    result = _run("inspect", str(zoo_onnx_path("normalized_input")))
    assert result["code"] == 0 and result["threads"] > 1  # numpy imported as usual: its BLAS threads


def test_port_onnx_to_coreml_imports_no_frontend(zoo_onnx_path, tmp_path):
    pytest.importorskip("coremltools")
    code, heavy = _imports("port", str(zoo_onnx_path("resnet")), "--to", "coreml", "--hw", "cpu",
                           "-o", str(tmp_path / "out"), "--json")
    assert code == 0
    # coremltools' _deps would import both to probe its TF and torch frontends.
    assert "coremltools" in heavy and heavy & {"torch", "tensorflow", "keras"} == set()


def test_a_command_builds_only_its_own_parser(zoo_onnx_path, tmp_path):
    """``edgeconv port ...`` registers only ``port`` (converter/cli/__init__.py ``_app_for``): the other
    command modules are never imported; ``converter.cli.app`` still has every command."""
    driver = """
import contextlib, io, json, sys
from converter import cli
from converter.cli.commands import COMMAND_MODULES
with contextlib.redirect_stdout(io.StringIO()):
    code = cli.main(sys.argv[1:])
loaded = sorted(m for m in COMMAND_MODULES if f"converter.cli.commands.{m}" in sys.modules)
import typer.main
names = sorted(typer.main.get_command(cli.app).commands)
print(json.dumps({"code": code, "loaded": loaded, "names": names, "all": sorted(COMMAND_MODULES)}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", driver, "port", str(zoo_onnx_path("normalized_input")), "--to",
                           "tflite", "--hw", "cpu", "--no-verify", "-o", str(tmp_path / "out"), "--json"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0 and result["loaded"] == ["port"]
    assert result["names"] == result["all"] and len(result["all"]) == 10


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; numpy's BLAS starts none on one core")
def test_a_verified_torch_port_forks_its_loader_then_uses_every_core(tmp_path):
    """A torch source loads in a child process: numpy comes without BLAS threads so that the
    single-threaded parent forks it (no fresh interpreter to start), and OpenBLAS gets one
    thread per core back for verification (converter/infra/blas.py)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    path = tmp_path / "m.pt"
    torch.jit.trace(model.eval(), torch.zeros(1, 3, 8, 8)).save(str(path))
    driver = """
import contextlib, io, json, os, sys
import converter.frontend.isolate as isolate
started = []
for name in ("_run_forked", "_run_spawned"):
    def wrap(*args, _real=getattr(isolate, name), _name=name, **kwargs):
        started.append(_name)
        return _real(*args, **kwargs)
    setattr(isolate, name, wrap)
from converter.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
from threadpoolctl import threadpool_info
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"code": code, "started": started, "blas": blas}))
"""
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_THREAD_VARIABLES}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", driver, "port", str(path), "-s", "1x3x8x8", "--to", "tflite",
                           "--hw", "cpu", "-o", str(tmp_path / "out"), "--json"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 0 and result["started"] == ["_run_forked"]
    assert result["blas"] == [len(os.sched_getaffinity(0))]


def test_fitting_an_architecture_change_imports_no_torch(zoo_onnx_path):
    """The unet's ConvTranspose becomes Resize + Conv on the Edge TPU (a ``retrain`` rewrite);
    the default fit of its weights is a least-squares solve in numpy (rewrites/retrain.py), so
    legalizing an ONNX model imports no torch."""
    driver = """
import json, sys
import onnx
from converter.legalize.apply import legalize
from converter.frontend.normalize import normalize
result = legalize(normalize(onnx.load(sys.argv[1])), "tflite", "edgetpu")
print(json.dumps({"rules": [r for r, _ in result.applied], "torch": "torch" in sys.modules,
                  "fitted": [r.error_after < r.error_before for r in result.retrain_reports]}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", driver, str(zoo_onnx_path("unet"))], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rules"] == ["convtranspose_to_resize_conv"] * 2
    assert result["fitted"] == [True, True] and result["torch"] is False
