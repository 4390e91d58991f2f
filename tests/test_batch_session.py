"""``edgeconv batch`` opens one PortSession per model: the manifest's targets of one model share
its load and its reference outputs (converter/batch/jobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from converter.batch import run_batch
from converter.port import loading


@pytest.fixture()
def load_calls(monkeypatch):
    calls = []
    real = loading.load_stage

    def counting(source, *args, **kwargs):
        calls.append(Path(source.path).name)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(loading, "load_stage", counting)
    return calls


def test_one_model_four_targets_loads_once(tmp_path, zoo_onnx_path, load_calls):
    pytest.importorskip("coremltools")
    (tmp_path / "det.onnx").write_bytes(Path(zoo_onnx_path("detector")).read_bytes())
    (tmp_path / "norm.onnx").write_bytes(Path(zoo_onnx_path("normalized_input")).read_bytes())
    manifest = tmp_path / "release.yaml"
    manifest.write_text(
        "targets:\n"
        "  - {to: tflite, hw: cpu}\n"
        "  - {to: tnn, hw: arm}\n"
        "  - {to: mace, hw: cpu}\n"
        "  - {to: coreml, hw: cpu}\n"
        "models:\n"
        "  - path: det.onnx\n"
        "  - path: norm.onnx\n"
        "    targets: [{to: tflite, hw: cpu}, {to: mace, hw: cpu}]\n")
    result = run_batch(manifest, tmp_path / "out")
    assert [(r.id, r.status) for r in result.results] == [
        ("det--tflite--cpu", "ok"), ("det--tnn--arm", "ok"), ("det--mace--cpu", "ok"), ("det--coreml--cpu", "ok"),
        ("norm--tflite--cpu", "ok"), ("norm--mace--cpu", "ok")]
    assert load_calls == ["det.onnx", "norm.onnx"]  # one load per model, not one per job
    for r in result.results:
        assert (tmp_path / "out" / r.id / "report.json").is_file()
    # a rerun finds every job cached and loads nothing
    load_calls.clear()
    again = run_batch(manifest, tmp_path / "out")
    assert all(r.cached for r in again.results) and load_calls == []
