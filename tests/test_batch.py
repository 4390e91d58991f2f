"""`edgeconv batch`: manifest validation, parallel jobs, cache, kill-and-resume, summaries, Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from converter.batch import load_manifest, run_batch
from converter.errors import BadInput

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def release(tmp_path, zoo_onnx_path):
    """Two zoo models and a corrupt one, × tflite/cpu and tnn/arm."""
    for name in ("resnet", "normalized_input"):
        (tmp_path / f"{name}.onnx").write_bytes(Path(zoo_onnx_path(name)).read_bytes())
    (tmp_path / "broken.onnx").write_bytes(b"\x08\x07 not a model")
    manifest = tmp_path / "release.yaml"
    manifest.write_text(
        "output: out\n"
        "targets:\n"
        "  - {to: tflite, hw: cpu}\n"
        "  - {to: tnn, hw: [arm]}\n"
        "models:\n"
        "  - path: resnet.onnx\n"
        "    atol: 1.0e-4\n"
        "  - path: normalized_input.onnx\n"
        "    name: norm\n"
        "  - path: broken.onnx\n"
        "    targets: [{to: tflite, hw: cpu}]\n"
    )
    return manifest


def _target_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.suffix in (".tflite", ".tnnproto", ".tnnmodel")}


def test_batch_runs_caches_and_reports(release):
    out = release.parent / "out"
    first = run_batch(release, jobs=2)
    statuses = {r.id: r.status for r in first.results}
    assert statuses == {"resnet--tflite--cpu": "ok", "resnet--tnn--arm": "ok", "norm--tflite--cpu": "ok",
                        "norm--tnn--arm": "ok", "broken--tflite--cpu": "bad_input"}
    assert first.exit_code == 6
    summary = json.loads((out / "batch-summary.json").read_text())
    assert summary["counts"] == {"bad_input": 1, "cached": 0, "ok": 4} and summary["exit_code"] == 6
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite.get("tests") == "5" and suite.get("errors") == "1" and suite.get("failures") == "0"
    assert len(suite.findall("testcase")) == 5
    index = (out / "index.html").read_text()
    assert index.count('/report.html">report</a>') == 4
    for job in ("resnet--tflite--cpu", "norm--tnn--arm"):
        assert (out / job / "report.html").exists() and (out / job / "job.json").exists()
    assert not list(out.glob(".partial-*"))
    files = _target_files(out)
    assert len(files) == 6

    second = run_batch(release, jobs=1)
    assert sum(r.cached for r in second.results) == 4  # the four finished jobs were skipped
    assert {r.id for r in second.results if not r.cached} == {"broken--tflite--cpu"}

    forced = run_batch(release, jobs=1, force=True)
    assert sum(r.cached for r in forced.results) == 0
    assert _target_files(out) == files  # deterministic: byte-identical target files

    # A changed model invalidates only its own jobs.
    data = (release.parent / "resnet.onnx").read_bytes()
    (release.parent / "resnet.onnx").write_bytes(data + b"\x00" * 0)  # same bytes: still cached
    (release.parent / "norm_tol.yaml").write_text("atol: 1.0e-3\n")
    text = release.read_text().replace("    name: norm\n", "    name: norm\n    tolerances: norm_tol.yaml\n")
    release.write_text(text)
    third = run_batch(release, jobs=1)
    assert {r.id for r in third.results if not r.cached} == {"norm--tflite--cpu", "norm--tnn--arm",
                                                            "broken--tflite--cpu"}


@pytest.mark.parametrize("text,match", [
    ("models: []\ntargets: [{to: tflite, hw: cpu}]\n", r"release.yaml:1: models: a non-empty list"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: resnet.onnx\n    colour: red\n",
     r"release.yaml:4: models.0.colour: unknown key"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: nothere.onnx\n", r"models.0.path: nothere.onnx: no such file"),
    ("targets: [{to: tnn, hw: nopu}]\nmodels:\n  - path: resnet.onnx\n",
     r"unknown hardware 'nopu' for tnn; choose one of: arm, x86"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: resnet.onnx\n    input_shapes: {input: [1, 0]}\n",
     r"models.0.input_shapes.input: every dimension must be positive"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: resnet.onnx\n    input_shapes: {input: '1x3:int8'}\n",
     r"release.yaml:4: models.0.input_shapes.input: unknown element type 'int8'; choose one of: float32, float16, "
     r"int64, int32, bool"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: resnet.onnx\n    input_ranges: {input: '5:1'}\n",
     r"models.0.input_ranges.input: expected name=LOW:HIGH with LOW < HIGH"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - path: resnet.onnx\n    input_shapes: {ids: '1x8:int32'}\n"
     "    input_ranges: {ids: [0, 3000000000]}\n", r"models.0.input_ranges.ids: .*outside what int32 holds"),
    ("targets: [{to: tflite, hw: cpu}]\nmodels:\n  - {path: resnet.onnx}\n  - {path: resnet.onnx}\n",
     r"duplicate model name 'resnet'"),
    ("targets: [\n", r"release.yaml:\d+: invalid YAML"),
])
def test_manifest_errors_point_at_the_line(tmp_path, zoo_onnx_path, text, match):
    (tmp_path / "resnet.onnx").write_bytes(Path(zoo_onnx_path("resnet")).read_bytes())
    path = tmp_path / "release.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match=match):
        load_manifest(path)


def test_manifest_class_word_names_one_job_per_hardware(tmp_path, zoo_onnx_path):
    """`hw: npu` in a manifest means each NPU of the framework, as on the command line."""
    (tmp_path / "resnet.onnx").write_bytes(Path(zoo_onnx_path("resnet")).read_bytes())
    path = tmp_path / "release.yaml"
    path.write_text("targets:\n  - {to: tnn, hw: [npu, huawei_npu]}\n  - {to: mace, hw: npu}\n"
                    "models:\n  - path: resnet.onnx\n")
    jobs = load_manifest(path).jobs
    assert [(j.target, j.hw) for j in jobs] == [("tnn", "huawei_npu"), ("tnn", "rknpu"), ("tnn", "apple_npu"),
                                                ("mace", "dsp"), ("mace", "apu")]


def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "converter", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            start_new_session=True)


def _start_twelve_job_batch(tmp_path, zoo_onnx_path, jobs: int):
    """Four zoo models × three targets, started as a subprocess in its own process group;
    returns once the first job directory is complete (so there is something to interrupt)."""
    models = ["resnet", "unet", "mobilenetv2", "normalized_input"]
    for name in models:
        (tmp_path / f"{name}.onnx").write_bytes(Path(zoo_onnx_path(name)).read_bytes())
    manifest = tmp_path / "release.yaml"
    manifest.write_text("output: out\ntargets: [{to: tflite, hw: cpu}, {to: coreml, hw: cpu}, {to: tnn, hw: arm}]\n"
                        "models:\n" + "".join(f"  - path: {m}.onnx\n" for m in models))
    out = tmp_path / "out"
    proc = _cli("batch", str(manifest), "-j", str(jobs))
    deadline = time.time() + 240
    while time.time() < deadline and not any((p / "job.json").exists() for p in out.glob("*--*")):
        time.sleep(0.1)
    return proc, manifest, out


def test_kill_dash_nine_and_resume(tmp_path, zoo_onnx_path):
    proc, manifest, out = _start_twelve_job_batch(tmp_path, zoo_onnx_path, jobs=1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {p.name for p in out.glob("*--*") if not p.name.startswith(".")}
    assert 1 <= len(done_before) < 12
    for job in done_before:  # every job directory that exists is complete
        record = json.loads((out / job / "job.json").read_text())
        assert record["status"] == "ok"
        assert (out / job / "report.json").exists()
    assert not (out / "batch-summary.json").exists()

    res = _cli("batch", str(manifest), "-j", "2")
    stdout, stderr = res.communicate(timeout=600)
    assert res.returncode == 0, stderr
    summary = json.loads((out / "batch-summary.json").read_text())
    assert summary["counts"]["ok"] == 12 and summary["counts"]["cached"] == len(done_before)
    assert not list(out.glob(".partial-*")) and not list(out.glob(".old-*"))


def test_ray_executor(release):
    pytest.importorskip("ray")
    text = release.read_text().replace("  - path: broken.onnx\n    targets: [{to: tflite, hw: cpu}]\n", "")
    release.write_text(text)
    result = run_batch(release, out_dir=release.parent / "ray-out", executor="ray")
    assert result.exit_code == 0
    assert [r.status for r in result.results] == ["ok"] * 4
    summary = json.loads((release.parent / "ray-out" / "batch-summary.json").read_text())
    assert summary["counts"] == {"cached": 0, "ok": 4}
    again = run_batch(release, out_dir=release.parent / "ray-out", executor="ray")
    assert sum(r.cached for r in again.results) == 4


def test_ctrl_c_stops_parallel_batch_cleanly(tmp_path, zoo_onnx_path):
    proc, _, out = _start_twelve_job_batch(tmp_path, zoo_onnx_path, jobs=2)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert stderr.strip().splitlines()[-1].startswith("edgeconv: error:")
    summary = json.loads((out / "batch-summary.json").read_text())
    assert summary["interrupted"] is True and summary["counts"].get("interrupted", 0) >= 1
    assert not list(out.glob(".partial-*"))
