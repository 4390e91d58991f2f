"""A wheel of this checkout, installed into a fresh venv outside it, runs check / port / report.

The wheel is built from a copy of the tracked files (so no stale build/ folder of the checkout can
leak into it), installed with its declared dependencies from the package index into a venv that
shares nothing with the test environment, and the CLI runs from a scratch directory holding a
decoy matrix: everything it reads must come from the installed package.  Takes about a minute
(wheel 5 s, install 25 s with a warm pip cache, the three commands 20 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]


def _run(cmd, cwd, env, timeout=300):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _copy_tracked_files(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src = REPO / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            shutil.copy2(src, target)


def _model(path: Path) -> None:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, seeded weights."""
    rng = np.random.default_rng(18)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2, "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b"),
             numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32) * 0.3, "fc_w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "fc_b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}

    src = tmp_path / "src"
    _copy_tracked_files(src)
    wheel_cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "wheel", src]
    if importlib.util.find_spec("setuptools") is not None:
        wheel_cmd.insert(5, "--no-build-isolation")  # the test env has the build backend already
    built = _run(wheel_cmd, tmp_path, env)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("edgeconv-*.whl")

    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, env)
    assert made.returncode == 0, made.stderr
    python, edgeconv = venv / "bin" / "python", venv / "bin" / "edgeconv"
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", wheel], tmp_path, env, 600)
    assert installed.returncode == 0, installed.stderr
    install_seconds = time.monotonic() - started

    work = tmp_path / "work"
    (work / "converter" / "data").mkdir(parents=True)
    for decoy in (work / "op_support_matrix.yaml", work / "converter" / "data" / "op_support_matrix.yaml"):
        decoy.write_text("version: [not a matrix\n")  # read by mistake, it would fail loudly
    _model(work / "tiny.onnx")

    where = _run([python, "-c", "import converter.matrix as m; print(m.__file__); print(m.DEFAULT_MATRIX)"], work, env)
    assert where.returncode == 0, where.stderr
    module_file, matrix_file = (Path(line) for line in where.stdout.split())
    site = venv / "lib"
    assert module_file.is_relative_to(site) and matrix_file.is_relative_to(site), where.stdout
    assert not matrix_file.is_symlink()
    assert matrix_file.read_bytes() == (REPO / "converter" / "data" / "op_support_matrix.yaml").read_bytes()

    check = _run([edgeconv, "check", "tiny.onnx", "--to", "tflite", "--hw", "cpu", "--json"], work, env)
    assert check.returncode == 0, check.stderr
    doc = json.loads(check.stdout)
    (target,) = doc["targets"]
    assert target["counts"] == {"nodes": 5, "supported": 5, "unverified": 0, "unsupported": 0}
    litert = "https://github.com/google-ai-edge/LiteRT/blob/f67457790c9c2ab67347d6fe53270e8d3df20868/"
    for verdict in target["verdicts"]:
        assert verdict["citation"]["url"].startswith(litert), verdict
        assert verdict["source"] == verdict["citation"]["text"]

    port = _run([edgeconv, "port", "tiny.onnx", "--to", "tflite", "--hw", "cpu", "-o", "out"], work, env)
    assert port.returncode == 0, port.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    assert report["status"] == "ok", report.get("reason")
    assert (work / "out" / "tiny.tflite").stat().st_size > 1000
    assert "<h2>Check against the support matrix</h2>" in (work / "out" / "report.html").read_text()

    page = _run([edgeconv, "report", "--model", "tiny.onnx", "-o", "matrix.html"], work, env)
    assert page.returncode == 0, page.stderr
    html = (work / "matrix.html").read_text()
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
                      .group(1).replace("<\\/", "</"))
    ops = {row["op"] for row in data["rows"]}
    assert {"Conv", "ConvTranspose", "LSTM", "NonMaxSuppression", "Resize"} <= ops and len(ops) > 90
    assert data["model"]["ops"] == ["Conv", "Flatten", "Gemm", "GlobalAveragePool", "Relu"]
    table = "Tencent/TNN@f0cb081:doc/en/user/support_en.md#L65-L190"
    assert data["links"][table] == ("https://github.com/Tencent/TNN/blob/f0cb08129a05c5b60f08e4ef66042a54a883a56a/"
                                    "doc/en/user/support_en.md#L65-L190")
    assert all(url.startswith("https://github.com/") for url in data["links"].values())

    print(f"wheel + fresh venv install {install_seconds:.0f} s, total {time.monotonic() - started:.0f} s")
