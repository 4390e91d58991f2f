"""One regression test per defect of issue 17 that the corpus test (test_hostile.py) does not
pin down by itself: signals, kill -9, concurrent writers, IR versions 3-10, the report page,
batch summaries with markup in paths, the pickle scanner's allowlist."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.hostile import corpus as hc

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "converter", *map(str, args)], capture_output=True, text=True,
                          env=_env(), cwd=cwd, timeout=timeout)


@pytest.fixture(scope="module")
def torch_files(tmp_path_factory):
    return hc.build_torch_files(tmp_path_factory.mktemp("torchfiles"))


# ------------------------------------------------------------------------ 1: pickles, code


def test_pt2_pickled_constant_never_runs_even_on_the_python_api(torch_files, tmp_path):
    from converter.errors import BadInput
    from converter.frontend.load import load_model

    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil.pt2"

    def swap(name, data):
        if name.endswith("model_constants_config.json"):
            config = json.loads(data)
            for entry in config["config"].values():
                entry["use_pickle"] = True
            return json.dumps(config).encode()
        return hc.payload_pickle(marker) if "/data/constants/tensor_" in name else data

    hc._rewrite_zip(torch_files["pt2"], evil, swap)
    with pytest.raises(BadInput, match="posix.system|os.system"):
        load_model(evil)
    assert not marker.exists()


def test_pickle_scanner_passes_real_archives_and_names_the_callable(torch_files, tmp_path):
    import torch

    from converter.frontend.pickle_guard import pickle_globals, unsafe_pickles

    assert unsafe_pickles(torch_files["pt2"]) == []
    assert unsafe_pickles(torch_files["ts"], torchscript=True) == []
    state = tmp_path / "state.pt"
    torch.save({"w": torch.ones(3), "b": torch.zeros(2, dtype=torch.int64)}, state)
    assert unsafe_pickles(state) == []
    names, complete = pickle_globals(hc.payload_pickle(tmp_path / "x", protocol=4))
    assert complete and ("posix", "system") in names
    names, complete = pickle_globals(hc.payload_pickle(tmp_path / "x", protocol=0))
    assert complete and ("posix", "system") in names
    # A payload cut short still ran what came before the cut: refused as unreadable.
    assert pickle_globals(hc.payload_pickle(tmp_path / "x")[:-1])[1] is False


def test_npz_with_object_arrays_is_refused_without_unpickling(tmp_path):
    from converter.errors import BadInput
    from converter.runtimes.feeds import load_npz

    marker = tmp_path / "PWNED"
    path = tmp_path / "inputs.npz"
    with zipfile.ZipFile(path, "w") as z:  # an .npy holding a pickled object array
        header = np.lib.format.header_data_from_array_1_0(np.empty(1, dtype=object))
        buf = __import__("io").BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        z.writestr("x.npy", buf.getvalue() + hc.payload_pickle(marker))
    with pytest.raises(BadInput):
        load_npz(str(path), hc.relu_model())
    assert not marker.exists()


def test_keras_h5_lambda_is_refused_before_keras_reads_it(tmp_path):
    h5py = pytest.importorskip("h5py")
    from converter.errors import BadInput
    from converter.frontend.load_tf import refuse_keras_code

    path = tmp_path / "lambda.h5"
    config = {"class_name": "Sequential", "config": {"layers": [{"class_name": "Lambda", "config": {
        "function": ["4wEAAAAA", None, None], "function_type": "lambda"}}]}}
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config)
    with pytest.raises(BadInput, match="Lambda layer"):
        refuse_keras_code(path)


# ------------------------------------------------------------- 2: a forward that never returns


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_a_spinning_torchscript_forward(torch_files, tmp_path, sig, code):
    proc = subprocess.Popen([sys.executable, "-m", "converter", "inspect", str(torch_files["spin"]), "-s", "1x4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not _children(proc.pid) and time.monotonic() < deadline:  # the child runs the model
        time.sleep(0.1)
    children = _children(proc.pid)
    assert children, "the model never ran in a child process"
    time.sleep(1.0)  # well inside torch's loop now
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code
    assert len(err.strip().splitlines()) == 1 and err.startswith("edgeconv: error: ")
    time.sleep(0.2)
    assert not any(Path(f"/proc/{c}").exists() and "zombie" not in Path(f"/proc/{c}/status").read_text()
                   for c in children), "the model's process outlived edgeconv"


def test_sigterm_stops_onnxruntime_inside_an_endless_loop(tmp_path):
    model = tmp_path / "loop.onnx"
    onnx.save(hc.endless_loop_model(), model)
    proc = subprocess.Popen([sys.executable, "-m", "converter", "normalize", str(model), "-o", str(tmp_path / "n.onnx")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    time.sleep(6)  # imports, normalization, then the equivalence check spins in onnxruntime
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "n.onnx").exists()


def test_timeout_is_exit_9_and_documented(torch_files, tmp_path):
    from converter.errors import EXIT_TIMEOUT

    start = time.monotonic()
    res = _cli("check", torch_files["spin"], "-s", "1x4", "-t", "tflite", "--timeout", "2", cwd=tmp_path)
    assert res.returncode == EXIT_TIMEOUT == 9
    assert "within 2 s (--timeout)" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert time.monotonic() - start < 60
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert "| 9 |" in usage


# ------------------------------------------------------------------------ 3: YAML alias bombs


def test_alias_bomb_is_refused_fast_and_ordinary_aliases_work(tmp_path):
    from converter.matrix.loader import MatrixFileError, read_yaml_with_lines

    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(hc.alias_bomb_yaml(levels=30))
    start = time.monotonic()
    with pytest.raises(MatrixFileError, match="expands to more than"):
        read_yaml_with_lines(bomb)
    assert time.monotonic() - start < 10
    fine = tmp_path / "fine.yaml"
    fine.write_text("a: &x {k: 1}\nb: *x\nc: [*x, *x]\n")
    data, lines = read_yaml_with_lines(fine)
    assert data == {"a": {"k": 1}, "b": {"k": 1}, "c": [{"k": 1}, {"k": 1}]}
    assert lines[("c", 1, "k")] == ("fine.yaml", 1)


# ------------------------------------------------------------- 4, 5: folding cap, memory estimate


def test_constant_of_shape_bomb_stays_unfolded_with_a_note():
    from converter.frontend.normalize import UNFOLDED_NOTE_KEY, normalize
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([100000, 100000], np.int64), "shape")
    small = numpy_helper.from_array(np.array([2, 3], np.int64), "small")
    model = hc._model(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"], value=numpy_helper.from_array(np.ones(1, np.float32))),
         helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
         helper.make_node("ConstantOfShape", ["small"], ["tiny"], value=numpy_helper.from_array(np.ones(1, np.float32))),
         helper.make_node("ReduceSum", ["tiny"], ["t"], keepdims=0),
         helper.make_node("Add", ["x", "s"], ["a"]), helper.make_node("Add", ["a", "t"], ["y"])],
        [hc._vi("x", [1, 4])], [hc._vi("y", [1, 4])], [shape, small])
    start = time.monotonic()
    out = normalize(model)
    assert time.monotonic() - start < 30
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("ConstantOfShape") == 1  # the 37 GiB one stays; the 6-element one folded
    note = {p.key: p.value for p in out.metadata_props}[UNFOLDED_NOTE_KEY]
    assert "ConstantOfShape" in note and "1 constant(s) left unfolded" in note
    del TensorProto


def test_memory_estimate_refuses_with_the_number(tmp_path):
    model = tmp_path / "dyn.onnx"
    onnx.save(hc.relu_model(shape=(1, 3, "h", "w")), model)
    res = _cli("port", model, "-t", "tflite", "-s", "1x3x99999x99999", "-o", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 2
    assert "would need about" in res.stderr and "GiB" in res.stderr and "--max-memory" in res.stderr
    assert not (tmp_path / "out").exists()
    res = _cli("verify", model, model, "-s", "1x3x99999x99999", cwd=tmp_path)
    assert res.returncode == 2 and "would need about" in res.stderr, res.stderr
    from converter.ir.memory import inference_bytes, parse_size

    assert parse_size("8G") == 8 << 30 and parse_size("512MiB") == 512 << 20
    needed, biggest = inference_bytes(hc.relu_model(shape=(1, 3, 100, 100)))
    # x and y (120 kB each) plus float64 copies of both for the metrics.
    assert needed == 2 * (30000 * 4 + 30000 * 16)


# ------------------------------------------------------------------------ 6: IR 3 .. 10


@pytest.mark.parametrize("ir", range(3, 11))
def test_old_ir_versions_normalize_and_check(ir):
    from converter.legalize.check import check_model
    from converter.frontend.load import load_onnx
    from converter.frontend.normalize import check_equivalent, normalize

    model = hc.conv_model(np.random.default_rng(ir), ir, 7 if ir < 8 else 17)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"edgeconv-test-ir{ir}-{os.getpid()}.onnx"
    onnx.save(model, path)
    try:
        loaded = load_onnx(path)
    finally:
        path.unlink()
    out = normalize(loaded)
    onnx.checker.check_model(out)
    assert out.ir_version >= 8
    assert check_equivalent(loaded, out) <= 1e-5
    assert check_model(out, "tflite", "cpu").ok


# --------------------------------------------------------------------- 7: markup in batch paths


def test_batch_with_markup_in_paths_writes_summary_and_junit(tmp_path):
    models = tmp_path / "m[" / "x]"  # the model's path reads ".../m[/x]/a.onnx"
    models.mkdir(parents=True)
    onnx.save(hc.relu_model(in_name="[/x]"), models / "a.onnx")
    (models / "bad.onnx").write_bytes(b"not a model")
    manifest = tmp_path / "release[bold].yaml"
    manifest.write_text(f"output: {tmp_path / 'out'}\ntargets:\n  - {{to: tflite, hw: cpu}}\nmodels:\n"
                        f"  - path: '{models / 'a.onnx'}'\n  - path: '{models / 'bad.onnx'}'\n")
    res = _cli("batch", manifest, cwd=tmp_path, timeout=300)
    assert res.returncode == 6, res.stderr
    summary = json.loads((tmp_path / "out" / "batch-summary.json").read_text())
    assert summary["counts"]["ok"] == 1 and summary["counts"]["bad_input"] == 1
    assert (tmp_path / "out" / "junit.xml").exists() and (tmp_path / "out" / "index.html").exists()
    assert "m[/x]" in res.stderr  # the progress line shows the path as it is
    assert "Traceback" not in res.stderr and "MarkupError" not in res.stderr


# --------------------------------------------------------------------------- 8: report pages


@pytest.mark.parametrize("name", ["@@JS@@.onnx", "@@DATA@@</script><script>alert(1)</script>.onnx"])
def test_report_page_is_whole_whatever_the_model_is_called(tmp_path, name):
    from converter.report.matrix_page import _JS, build_matrix_page
    from converter.matrix import load_matrix

    page = build_matrix_page(load_matrix(), None, name)
    assert page.count(_JS) == 1 and page.count("</script>") == 2
    assert "<script>alert(1)" not in page
    blob = page.split('id="data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(blob)["model"] is None or name in json.dumps(json.loads(blob))


# ------------------------------------------------------------- 9: batch workers and kill -9


def test_batch_workers_die_with_a_killed_parent(torch_files, tmp_path):
    manifest = tmp_path / "spin.yaml"
    manifest.write_text(f"output: {tmp_path / 'out'}\ntargets:\n  - {{to: tflite, hw: cpu}}\n  - {{to: tnn, hw: arm}}\n"
                        f"models:\n  - path: {torch_files['spin']}\n    input_shapes: {{x: [1, 4]}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "converter", "batch", str(manifest), "-j", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=tmp_path)
    deadline = time.monotonic() + 90
    workers: list[int] = []
    while time.monotonic() < deadline:
        workers = _children(proc.pid)
        grandchildren = [g for w in workers for g in _children(w)]
        if len(workers) >= 2 and grandchildren:
            break
        time.sleep(0.2)
    assert workers, "no batch workers started"
    everyone = workers + [g for w in workers for g in _children(w)]
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 15
    alive = everyone
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in everyone if Path(f"/proc/{p}").exists()
                 and "State:\tZ" not in Path(f"/proc/{p}/status").read_text()]
    assert not alive, f"processes outlived the killed batch: {alive}"


# -------------------------------------------------- 10, 11: whole output directories, stale temps


def _port(model, out, cwd):
    return _cli("port", model, "-t", "tflite", "-o", out, "--no-verify", cwd=cwd)


def test_output_dir_is_replaced_whole_and_locked(tmp_path):
    from converter.infra.fsutil import OUTPUT_MARKER, _locked

    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    onnx.save(hc.relu_model(), first)
    onnx.save(hc.relu_model(shape=(1, 8)), second)
    out = tmp_path / "out"
    assert _port(first, out, tmp_path).returncode == 0
    (out / "stale.txt").write_text("from an earlier run")
    assert _port(second, out, tmp_path).returncode == 0
    names = sorted(p.name for p in out.iterdir())
    assert "second.tflite" in names and "first.tflite" not in names and "stale.txt" not in names
    assert OUTPUT_MARKER in names
    with _locked(out):  # another writer holds the directory
        res = _port(first, out, tmp_path)
    assert res.returncode == 2 and "being written by another edgeconv run" in res.stderr
    assert "second.tflite" in {p.name for p in out.iterdir()}
    assert not list(tmp_path.glob(".out.edgeconv-*"))


def test_two_concurrent_ports_never_mix_their_files(tmp_path):
    good, good2 = tmp_path / "good.onnx", tmp_path / "good2.onnx"
    onnx.save(hc.relu_model(), good)
    onnx.save(hc.relu_model(shape=(1, 8)), good2)
    out = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "converter", "port", str(m), "-t", "tflite", "-o", str(out),
                               "--no-verify"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=_env(), cwd=tmp_path) for m in (good, good2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code in (0, 2) for code, _ in results) and any(code == 0 for code, _ in results)
    for code, err in results:
        assert code == 0 or "being written by another edgeconv run" in err
    models = sorted(p.name for p in out.glob("*.tflite"))
    assert len(models) == 1
    report = json.loads((out / "report.json").read_text())
    assert Path(report["model"]).stem == Path(models[0]).stem


def test_a_users_directory_is_never_replaced(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    model = tmp_path / "m.onnx"
    onnx.save(hc.relu_model(), model)
    res = _port(model, mine, tmp_path)
    assert res.returncode == 2 and "not written by edgeconv" in res.stderr
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]


def test_temp_dirs_of_dead_runs_are_removed(tmp_path):
    from converter.infra.fsutil import pid_alive

    dead = 2 ** 22 + 12345
    while pid_alive(dead):
        dead += 1
    model = tmp_path / "m.onnx"
    onnx.save(hc.relu_model(), model)
    out = tmp_path / "out"
    assert _port(model, out, tmp_path).returncode == 0
    inner = out / f".edgeconv-{dead}-abcd"  # an atomic_output_dir of a killed run
    sibling = tmp_path / f".out.edgeconv-tmp-{dead}-abcd"  # a killed port's whole output
    legacy = out / ".edgeconv-x1y2z3"  # an older version's temp dir (no pid in the name)
    for d in (inner, sibling, legacy):
        d.mkdir()
        (d / "half.tflite").write_bytes(b"\0" * 10)
    assert _port(model, out, tmp_path).returncode == 0
    assert not inner.exists() and not sibling.exists() and not legacy.exists()


def test_port_killed_with_sigkill_leaves_nothing_a_rerun_keeps(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(hc.relu_model(), model)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "converter", "port", str(model), "-t", "tflite", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=tmp_path)
    deadline = time.monotonic() + 90
    while not list(tmp_path.glob(".out.edgeconv-tmp-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    assert _port(model, out, tmp_path).returncode == 0
    assert not list(tmp_path.glob(".out.edgeconv-*"))
    assert not [p for p in out.rglob(".edgeconv-*") if p.name != ".edgeconv-output"]


# ---------------------------------------------------- the exit-code table (docs/usage.md)


def test_usage_doc_exit_code_table_matches_errors_py():
    import re

    from converter import errors
    from converter.batch.runner import EXIT_BATCH_FAILED

    codes = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}
    codes.add(EXIT_BATCH_FAILED)
    usage = (ROOT / "docs" / "usage.md").read_text()
    table = usage.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == codes
    docstring = errors.__doc__
    assert {int(m) for m in re.findall(r"^\s+(\d+)\s", docstring, re.M)} | {143} >= codes



def test_markup_and_unsafe_names_through_normalize_plan_split(tmp_path):
    """Names the edge formats cannot carry are renamed by normalization; the equivalence check
    matches inputs and outputs by position, and no command reads a name as markup."""
    model = tmp_path / "m[" / "x].onnx"
    model.parent.mkdir()
    onnx.save(hc.relu_model(in_name="[/x]", out_name="[bold]y[/bold]"), model)
    res = _cli("normalize", model, "-o", tmp_path / "n.onnx", cwd=tmp_path)
    assert res.returncode == 0 and "max abs error vs input 0" in res.stdout, res.stderr
    res = _cli("plan", model, "-t", "tflite", "--all-nodes", cwd=tmp_path)
    assert res.returncode == 0 and "m[/x].onnx" in res.stdout, res.stderr


def test_batch_job_timeout_is_one_failed_job(torch_files, tmp_path):
    manifest = tmp_path / "spin.yaml"
    manifest.write_text(f"output: {tmp_path / 'out'}\ntargets:\n  - {{to: tflite, hw: cpu}}\nmodels:\n"
                        f"  - path: {torch_files['spin']}\n    input_shapes: {{x: [1, 4]}}\n    timeout: 2\n"
                        f"    max_memory: 1G\n")
    res = _cli("batch", manifest, cwd=tmp_path, timeout=300)
    assert res.returncode == 6, res.stderr
    (job,) = json.loads((tmp_path / "out" / "batch-summary.json").read_text())["jobs"]
    assert job["exit_code"] == 9 and "within 2 s" in job["reason"]
    assert (tmp_path / "out" / "junit.xml").exists()
