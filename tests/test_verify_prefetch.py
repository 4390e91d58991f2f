"""A port computes its reference outputs while it legalizes and exports
(``SharedWork.prefetch``), and the verdict is the one computed without that."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from converter.port import verification
from converter.errors import BadInput
from converter.port import PortRequest, PortSession, port
from converter.port.shared_work import MemoRunner, SharedWork
from converter.runtimes import onnxruntime as runtime


def _count_sessions(monkeypatch) -> list:
    made = []
    real = runtime.session

    def counting(model, *args, **kwargs):
        made.append(threading.current_thread().name)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(runtime, "session", counting)
    return made


def test_a_port_prefetches_in_a_worker_and_the_verdict_is_unchanged(zoo_onnx_path, zoo_model, tmp_path,
                                                                   monkeypatch):
    from converter.frontend.load import load_model

    path = str(zoo_onnx_path("detector"))
    session = PortSession.with_models(PortRequest.from_flags(path), load_model(path), zoo_model("detector"))
    made = _count_sessions(monkeypatch)
    shared = session.shared
    early = session.port_pair("mace", "cpu", tmp_path / "early")
    assert early.status == "ok"
    assert early.report["postprocess"], "the detector's head is cut off for mace: a legalized model of its own"
    # original, normalized and legalized each ran once, all three in the worker thread; the one
    # session in the main thread is the exported MACE file's own run (the reader's onnxruntime)
    assert shared.original.computed == 1 and shared.normalized.computed == 1
    assert sorted(made) == ["MainThread"] + ["edgeconv-prefetch"] * 3
    assert early.report["oracle"].startswith("edgeconv MACE reader")

    monkeypatch.setattr(verification, "start_reference_runs", lambda *a: None)
    monkeypatch.setattr(verification, "prefetch_legalized", lambda *a: None)
    made.clear()
    late = PortSession.with_models(PortRequest.from_flags(path), load_model(path), zoo_model("detector")).port_pair(
        "mace", "cpu", tmp_path / "late")
    assert made and "edgeconv-prefetch" not in made
    assert json.dumps(early.report["verification"], sort_keys=True) == \
        json.dumps(late.report["verification"], sort_keys=True)


def test_an_unchanged_model_runs_once_for_the_normalized_and_legalized_stages(zoo_onnx_path, tmp_path,
                                                                             monkeypatch):
    made = _count_sessions(monkeypatch)
    result = port(str(zoo_onnx_path("resnet")), to="tflite", hw="cpu", out=tmp_path / "p")
    assert result.status == "ok" and result.report["applied_rules"] == []
    stages = {s["name"]: s for s in result.report["verification"]["stages"]}
    assert stages["legalized"]["status"] == "pass"
    assert stages["legalized"]["outputs"] == stages["normalized"]["outputs"]
    assert len(made) == 2  # the original and the normalized model: the legalized one is the same


def test_a_failing_prefetch_is_reported_by_the_stage_that_needs_it():
    calls = []

    def broken(inputs):
        calls.append(threading.current_thread().name)
        raise BadInput("onnxruntime cannot load the model: broken")

    runner = MemoRunner(lambda: broken)
    shared = SharedWork(None, None)
    sample = {"x": np.zeros((1, 2), np.float32)}
    shared.prefetch(runner, [sample])
    with pytest.raises(BadInput, match="broken"):
        runner(sample)
    assert runner.computed == 0 and calls.count("MainThread") == 1


def test_prefetching_the_same_samples_twice_queues_them_once():
    ran = []
    runner = MemoRunner(lambda: lambda inputs: ran.append(1) or {"y": inputs["x"] * 2})
    shared = SharedWork(None, None)
    sample = {"x": np.ones((1, 2), np.float32)}
    shared.prefetch(runner, [sample])
    shared.prefetch(runner, [{"x": np.ones((1, 2), np.float32)}])
    np.testing.assert_array_equal(runner(sample)["y"], np.full((1, 2), 2, np.float32))
    assert runner.computed == 1 and ran == [1]
