"""``port --to all``: shared reference outputs, and ``-j N`` writes what ``-j 1`` writes."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from converter.cli import main
from converter.port import PortRequest, PortSession, port


def _files(root):
    # report.json/html and verify.* carry timings; every exported file must be byte-identical.
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.startswith(("report.", "verify."))}


def test_ports_of_one_model_compute_the_reference_outputs_once(zoo_onnx_path, zoo_model, tmp_path):
    from converter.frontend.load import load_model

    path = str(zoo_onnx_path("detector"))
    session = PortSession.with_models(PortRequest.from_flags(path), load_model(path), zoo_model("detector"))
    results = session.run([("tflite", "cpu"), ("mace", "cpu")], tmp_path, dirs=lambda fw, hw: tmp_path / fw)
    assert [r.status for r in results] == ["ok", "ok"]
    shared = session.shared
    assert shared.original.computed == 1 and shared.normalized.computed == 1
    alone = port(path, to="mace", hw="cpu", out=tmp_path / "alone")
    shared_stages = results[1].report["verification"]["stages"]
    alone_stages = alone.report["verification"]["stages"]
    assert json.dumps(shared_stages, sort_keys=True) == json.dumps(alone_stages, sort_keys=True)


@pytest.mark.parametrize("jobs", ["2"])
def test_parallel_port_writes_the_same_files(zoo_onnx_path, tmp_path, jobs):
    path = str(zoo_onnx_path("detector"))
    outputs = {}
    for j in ("1", jobs):
        out = tmp_path / f"j{j}"
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            code = main(["port", path, "--to", "all", "--hw", "cpu", "-j", j, "-o", str(out), "--json"])
        assert code == 0
        outputs[j] = (json.loads(printed.getvalue()), _files(out))
    (summary1, files1), (summary2, files2) = outputs["1"], outputs[jobs]
    assert [(r["target"], r["hw"], r["status"]) for r in summary1["results"]] == \
        [(r["target"], r["hw"], r["status"]) for r in summary2["results"]]
    assert {r["target"] for r in summary1["results"]} == {"tflite", "tnn", "mace", "coreml"}
    assert files1.keys() == files2.keys() and files1 == files2
