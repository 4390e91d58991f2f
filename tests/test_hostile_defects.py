"""One regression test per defect of issue 17 that the corpus test (test_hostile.py) does not
pin down by itself: signals, kill -9, concurrent writers, IR versions 3-10, the report page,
batch summaries with markup in paths, the pickle scanner's allowlist."""

from __future__ import annotations

import json
import os
import shutil
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
    from converter.infra.fsutil import OUTPUT_MARKER
    from converter.infra.outdirs import _locked

    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    onnx.save(hc.relu_model(), first)
    onnx.save(hc.relu_model(shape=(1, 8)), second)
    out = tmp_path / "out"
    assert _port(first, out, tmp_path).returncode == 0
    assert _port(second, out, tmp_path).returncode == 0
    names = sorted(p.name for p in out.iterdir())
    assert "second.tflite" in names and "first.tflite" not in names  # an earlier run's files do not survive
    assert OUTPUT_MARKER in names
    # A file the user put there is not edgeconv's: the directory is refused, byte for byte unchanged.
    (out / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    res = _port(first, out, tmp_path)
    assert res.returncode == 2 and "notes.txt, which edgeconv did not write" in res.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / "notes.txt").unlink()
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
    """A killed run's temp directories go when their marker proves them a dead run's; the same
    names without that proof are the user's: the directory is refused and nothing changes."""
    from converter.infra.fsutil import pid_alive
    from converter.infra.ownership import TEMP_MARKER, TEMP_FORMAT

    dead = 2 ** 22 + 12345
    while pid_alive(dead):
        dead += 1
    model = tmp_path / "m.onnx"
    onnx.save(hc.relu_model(), model)
    out = tmp_path / "out"
    assert _port(model, out, tmp_path).returncode == 0
    inner = out / f".edgeconv-{dead}-abcd"  # an atomic_output_dir of a killed run
    sibling = tmp_path / f".out.edgeconv-tmp-{dead}-abcd"  # a killed port's whole output
    for d in (inner, sibling):
        d.mkdir()
        (d / "half.tflite").write_bytes(b"\0" * 10)
        (d / TEMP_MARKER).write_text(json.dumps({"format": TEMP_FORMAT, "run": "x", "pid": dead}))
    users = tmp_path / f".out.edgeconv-tmp-{dead}-mine"  # the user's, by name only
    users.mkdir()
    (users / "thesis.tex").write_text("precious")
    assert _port(model, out, tmp_path).returncode == 0
    assert not inner.exists() and not sibling.exists()
    assert (users / "thesis.tex").read_text() == "precious"
    legacy = out / ".edgeconv-x1y2z3"  # no marker: not provably edgeconv's
    legacy.mkdir()
    (legacy / "half.tflite").write_bytes(b"\0" * 10)
    res = _port(model, out, tmp_path)
    assert res.returncode == 2 and ".edgeconv-x1y2z3/half.tflite" in res.stderr
    assert (legacy / "half.tflite").read_bytes() == b"\0" * 10


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


# ====================================================================== issue 28: new surfaces
# data loss: the user's files byte-identical after the run; hangs: done within --timeout + 5 s
# with no process left; silent-wrong: refused or unverified, never ok.


def _snapshot(path: Path) -> dict:
    """Every entry under ``path`` (dotfiles too) with its bytes (files) or None (directories)."""
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(path.rglob("*"))}


def _one_error_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeconv: error: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def _conv_model(path: Path) -> Path:
    onnx.save(hc.image_model(np.random.default_rng(0)), path)
    return path


def _manifest(path: Path, model: Path, target: str = "tflite", hw: str = "cpu", extra: str = "",
              top: str = "") -> Path:
    path.write_text(f"{top}targets: [{{to: {target}, hw: {hw}}}]\nmodels:\n  - path: {model}\n{extra}")
    return path


def test_batch_into_a_users_directory_changes_nothing(tmp_path):
    """Issue 28 #1: `.old-*`, `.partial-*`, index.html, junit.xml and a job directory of the same
    name in a directory edgeconv did not write: refused with one line, before any work."""
    model = _conv_model(tmp_path / "m.onnx")
    out = hc.user_directory(tmp_path / "out")
    (out / "junit.xml").write_text("mine")
    (out / "m--tflite--cpu").mkdir()
    (out / "m--tflite--cpu" / "report.json").write_text("mine")
    before = _snapshot(out)
    manifest = _manifest(tmp_path / "b.yaml", model)
    res = _cli("batch", manifest, "-o", out, cwd=tmp_path)
    assert res.returncode == 2 and "not written by edgeconv" in _one_error_line(res)
    assert _snapshot(out) == before
    via_manifest = _manifest(tmp_path / "b2.yaml", model, top=f"output: {out}\n")  # the manifest's output:
    res = _cli("batch", via_manifest, cwd=tmp_path)
    assert res.returncode == 2 and _snapshot(out) == before
    assert not list(tmp_path.glob(".out.*"))  # no lock or temp left beside it


def test_batch_replaces_only_what_it_wrote(tmp_path):
    from converter.infra.fsutil import pid_alive

    model = _conv_model(tmp_path / "m.onnx")
    manifest = _manifest(tmp_path / "b.yaml", model)
    out = tmp_path / "out"
    assert _cli("batch", manifest, "-o", out, cwd=tmp_path).returncode == 0
    assert _cli("batch", manifest, "-o", out, "--force", cwd=tmp_path).returncode == 0  # its own: replaced
    job = out / "m--tflite--cpu"
    dead = 2 ** 22 + 4321
    while pid_alive(dead):
        dead += 1
    stale = out / f".partial-{dead}-abcd1234-m--tflite--cpu"  # a killed batch's job, all edgeconv's
    shutil.copytree(job, stale)
    assert _cli("batch", manifest, "-o", out, "--force", cwd=tmp_path).returncode == 0
    assert not stale.exists()
    (job / "notes.txt").write_text("mine")  # the user's file inside a job directory
    before = _snapshot(out)
    res = _cli("batch", manifest, "-o", out, "--force", cwd=tmp_path)
    assert res.returncode == 2 and "m--tflite--cpu/notes.txt" in _one_error_line(res)
    assert _snapshot(out) == before


def test_port_split_verify_never_touch_a_users_directory(tmp_path):
    """Issue 28 #2: `.edgeconv-*` entries of the user's directory survive, also through a symlink
    and in the model's own directory; split, verify -o and demo follow the same rule."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes").write_text("k")
    (d / ".edgeconv-notes").write_text("k")
    model = _conv_model(d / "m.onnx")  # the model's own directory
    (tmp_path / "link").symlink_to(d)
    before = _snapshot(d)
    runs = [("port", model, "-t", "tflite", "-o", d), ("port", model, "-t", "tflite", "-o", tmp_path / "link"),
            ("port", model, "-t", "tflite", "--hw", "all", "-o", d), ("split", model, "-t", "tflite", "-o", d),
            ("verify", model, model, "-o", d)]
    for args in runs:
        res = _cli(*args, cwd=tmp_path)
        assert res.returncode == 2, (args, res.stderr)
        assert "not written by edgeconv" in _one_error_line(res)
        assert _snapshot(d) == before, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "link"]


@pytest.mark.parametrize("command", ["port", "split", "batch"])
@pytest.mark.parametrize("out", [".", "", "/"])
def test_output_names_that_name_no_directory_are_one_line(tmp_path, command, out):
    model = _conv_model(tmp_path / "m.onnx")
    args = {"port": ("port", model, "-t", "tflite", "-o", out), "split": ("split", model, "-t", "tflite", "-o", out),
            "batch": ("batch", _manifest(tmp_path / "b.yaml", model), "-o", out)}[command]
    before = _snapshot(tmp_path)
    res = _cli(*args, cwd=tmp_path)
    if command == "batch" and out == ".":  # writes *into* the directory: the cwd is not empty, not edgeconv's
        assert res.returncode == 2 and "not written by edgeconv" in _one_error_line(res)
    else:
        assert res.returncode == 2 and f"-o {out}" in _one_error_line(res)
    assert _snapshot(tmp_path) == before


def _processes_with(word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if word.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("how", ["flag", "env", "mace", "verify", "manifest"])
def test_a_runtime_that_never_answers_stops_at_the_timeout_with_its_children(tmp_path, how):
    """Issue 28 #4: --runtime obeys --timeout (it was a fixed 600 s) and the runtime's own child
    is killed with it (the whole process group): done within --timeout + 5 s, nothing left."""
    seconds = {"flag": 987601, "env": 987602, "mace": 987603, "verify": 987604, "manifest": 987605}[how]
    rt = hc.sleeping_runtime(tmp_path / "rt.sh", seconds)
    model = _conv_model(tmp_path / "m.onnx")
    out, env, timeout = tmp_path / "out", None, 4
    if how == "verify":
        assert _cli("port", model, "-t", "tnn", "-o", out, "--no-verify", cwd=tmp_path).returncode == 0
        args = ["verify", out / "normalized.onnx", out / "m.tnnproto", "--runtime", f"tnn={rt}", "--timeout", timeout]
    elif how == "manifest":
        manifest = _manifest(tmp_path / "b.yaml", model, "tnn", "arm", f"    timeout: {timeout}\n",
                             top=f"runtimes: {{tnn: {rt}}}\n")
        args = ["batch", manifest, "-o", tmp_path / "bout"]
    else:
        target = "mace" if how == "mace" else "tnn"
        args = ["port", model, "-t", target, "-o", out, "--timeout", timeout]
        if how == "env":
            env = {**_env(), "EDGECONV_TNN_RUNTIME": str(rt)}
        else:
            args += ["--runtime", f"{target}={rt}"]
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "converter", *map(str, args)], capture_output=True, text=True,
                         env=env or _env(), cwd=tmp_path, timeout=120)
    elapsed = time.monotonic() - start
    assert elapsed < timeout + 5, f"took {elapsed:.1f} s"  # the interpreter's start and the port included
    if how == "manifest":
        assert res.returncode == 6, res.stderr
        (job,) = json.loads((tmp_path / "bout" / "batch-summary.json").read_text())["jobs"]
        assert job["exit_code"] == 9 and f"within {timeout} s (--timeout)" in job["reason"]
    else:
        assert res.returncode == 9, res.stderr
        assert f"did not finish within {timeout} s (--timeout)" in _one_error_line(res)
        assert how == "verify" or not out.exists()
    assert _processes_with(f"sleep {seconds}") == [], "the runtime's child outlived the run"


def test_a_fifo_is_never_read_as_a_model(tmp_path):
    """Issue 28 #5: port, inspect and a batch entry answer at once (only regular files are models)."""
    fifo = tmp_path / "f.onnx"
    os.mkfifo(fifo)
    manifest = _manifest(tmp_path / "b.yaml", fifo)
    for args in [("port", fifo, "-t", "tflite", "--timeout", 5, "-o", tmp_path / "o"), ("inspect", fifo),
                 ("batch", manifest, "-o", tmp_path / "bo")]:
        start = time.monotonic()
        res = _cli(*args, cwd=tmp_path, timeout=60)
        assert res.returncode == 2 and "a FIFO, not a regular file" in _one_error_line(res)
        assert time.monotonic() - start < 5 + 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.yaml", "f.onnx"]


def test_an_unreachable_ray_cluster_is_one_line(tmp_path):
    """Issue 28 #6: `--executor ray --address 127.0.0.1:1` ran for 600 s; now exit 2 at once."""
    pytest.importorskip("ray")
    manifest = _manifest(tmp_path / "b.yaml", _conv_model(tmp_path / "m.onnx"))
    start = time.monotonic()
    res = _cli("batch", manifest, "--executor", "ray", "--address", "127.0.0.1:1", "-o", tmp_path / "out",
               cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "cannot connect to Ray at 127.0.0.1:1" in _one_error_line(res)
    assert time.monotonic() - start < 15
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(hc.invalid_attribute_models()))
def test_a_port_without_a_reference_is_never_ok(tmp_path, name):
    """Issue 28 #3: onnxruntime refuses the model (its attributes), so nothing checks the files:
    `unverified` (exit 8), not `ok`."""
    model = tmp_path / f"{name}.onnx"
    onnx.save(hc.invalid_attribute_models()[name], model)
    res = _cli("port", model, "-t", "tflite", "-o", tmp_path / "o", "--json", cwd=tmp_path)
    assert res.returncode == 8, res.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["status"] == "unverified" and report["reason"].startswith("not verified: onnxruntime")
    assert report["verification"]["ok"] is None


def test_preprocess_alias_bomb_is_refused_fast(tmp_path):
    """Issue 28 #7: the --preprocess YAML goes through the matrix reader's alias budget."""
    from converter.errors import BadInput
    from converter.quantize.preprocess import parse_spec

    bomb = tmp_path / "p.yaml"
    bomb.write_text(hc.alias_bomb_mapping("mean"))
    assert len(bomb.read_bytes()) < 600
    start = time.monotonic()
    with pytest.raises(BadInput, match="expands to more than 200,000 values"):
        parse_spec(str(bomb))
    assert time.monotonic() - start < 5
    fine = tmp_path / "ok.yaml"
    fine.write_text("mean: &m [0.5, 0.25, 0.125]\nstd: *m\n")  # an ordinary alias still works
    assert parse_spec(str(fine)).std == (0.5, 0.25, 0.125)


def test_calibration_uses_a_seeded_random_subset_and_says_so(tmp_path):
    """Issue 28 #8: a set of 2000 samples calibrates on 512 of them, chosen at random with the
    port's seed (the same ones on every run); the report and a warning say what was used."""
    from converter.quantize.calibration import MAX_SAMPLES, load_calibration

    model = hc.image_model(np.random.default_rng(0))
    data = np.random.default_rng(1).random((2000, 1, 3, 8, 8), dtype=np.float32)
    np.savez(tmp_path / "c.npz", x=data)
    got = load_calibration(tmp_path / "c.npz", model, seed=3)
    picked = sorted(np.random.default_rng(3).choice(2000, MAX_SAMPLES, replace=False))
    assert MAX_SAMPLES == 512 and len(got.samples) == 512 and got.total == 2000
    assert all(np.array_equal(s["x"], data[i]) for s, i in zip(got.samples, picked))
    assert "a random subset of 512 of its 2000 samples, seed 3" in got.source
    assert any("2000 samples; calibrating on a random subset of 512" in w for w in got.warnings)
    onnx.save(model, tmp_path / "m.onnx")
    res = _cli("port", tmp_path / "m.onnx", "-t", "tflite", "--quantize", "int8", "--calibration", tmp_path / "c.npz",
               "-o", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    info = json.loads((tmp_path / "o" / "report.json").read_text())["quantization"]["calibration"]
    assert info["samples"] == 512 and info["samples_in_source"] == 2000


def test_reading_a_calibration_directory_is_bounded_by_the_timeout(tmp_path):
    from converter.infra import limits as isolate
    from converter.errors import TimedOut
    from converter.quantize.calibration import load_calibration

    model = hc.image_model(np.random.default_rng(0))
    for k in range(40):
        np.save(tmp_path / f"{k:03d}.npy", np.zeros((1, 3, 8, 8), np.float32))
    isolate.set_time_limit(1e-6)
    try:
        with pytest.raises(TimedOut, match="reading the calibration set did not finish within"):
            load_calibration(tmp_path, model)
    finally:
        isolate.set_time_limit(None)
    assert len(load_calibration(tmp_path, model).samples) == 40


def test_yaml_keys_must_be_scalars_in_overlays_and_manifests(tmp_path):
    """Issue 28 #10: `? [a, b]` as a key was an internal error (unhashable type)."""
    model = _conv_model(tmp_path / "m.onnx")
    overlay = tmp_path / "ov.yaml"
    overlay.write_text("frameworks:\n  tflite:\n    ? [a, b]\n    : 1\n")
    res = _cli("check", model, "--to", "tflite", "--matrix-overlay", overlay, cwd=tmp_path)
    assert res.returncode == 2 and "ov.yaml:3: a key in frameworks.tflite is a list or mapping" in _one_error_line(res)
    manifest = tmp_path / "b.yaml"
    manifest.write_text(f"targets: [{{to: tflite, hw: cpu}}]\nmodels:\n  - path: {model}\n    ? {{a: 1}}\n    : 2\n")
    res = _cli("batch", manifest, "-o", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 2 and "b.yaml:4: a key in models.0 is a list or mapping" in _one_error_line(res)


def test_a_citation_line_number_of_5000_digits_is_one_line():
    """Issue 28 #11: int() of a 5000-digit line number raised ValueError (exit 70)."""
    from converter.matrix.citations import CitationError, parse_citation

    with pytest.raises(CitationError, match="a line number has more than 9 digits") as caught:
        parse_citation(f"Tencent/TNN@f0cb081:doc/a.md#L{'9' * 5000}")
    assert len(str(caught.value)) < 300
    assert parse_citation("Tencent/TNN@f0cb081:doc/a.md#L999999999").first == 999999999


@pytest.mark.parametrize("resize", ["[.inf, 12]", "[.nan, 12]", "[2.5, 12]", "[1e400, 1]", "[true, 12]"])
def test_preprocess_resize_must_be_whole_pixels(tmp_path, resize):
    """Issue 28 #12: `resize: [.inf, 12]` was an OverflowError (exit 70)."""
    from converter.errors import BadInput
    from converter.quantize.preprocess import parse_spec

    spec = tmp_path / "p.yaml"
    spec.write_text(f"resize: {resize}\n")
    with pytest.raises(BadInput, match="resize must be HEIGHTxWIDTH in whole pixels"):
        parse_spec(str(spec))
    spec.write_text("resize: [224.0, 112]\n")
    assert parse_spec(str(spec)).resize == (224, 112)


def test_an_npy_header_declaring_561_gib_is_refused_before_allocating(tmp_path):
    """Issue 28 #13: a calibration directory's .npy header is read before numpy allocates it."""
    from converter.errors import BadInput
    from converter.quantize.calibration import load_calibration

    hc.npy_header_only(tmp_path / "x.npy", (1000000, 1, 3, 224, 224))
    with pytest.raises(BadInput, match=r"declares shape \[1000000, 1, 3, 224, 224\] \(561 GiB"):
        load_calibration(tmp_path, hc.image_model(np.random.default_rng(0)))


def test_junit_xml_stays_xml_with_control_characters_in_op_types(tmp_path):
    """Issue 28 #14: an op type `Op\\x01` (custom domain) in a job's reason made junit.xml invalid."""
    from xml.etree import ElementTree as ET

    model = tmp_path / "ctl.onnx"
    onnx.save(hc._model([onnx.helper.make_node("Op\x01", ["x"], ["y"], domain="com.hostile")],
                        [hc._vi("x", [1, 4])], [hc._vi("y", [1, 4])], domains=["com.hostile"]), model)
    res = _cli("batch", _manifest(tmp_path / "b.yaml", model), "-o", tmp_path / "out", cwd=tmp_path)
    assert res.returncode == 6, res.stderr
    case = ET.parse(tmp_path / "out" / "junit.xml").getroot().find("testsuite/testcase")
    assert "Op\\x01" in case.find("failure").get("message")


def test_calibration_temp_dir_of_a_killed_run_is_removed_by_the_next(tmp_path):
    """Issue 28 #15: `kill -9` during calibration left $TMPDIR/edgeconv-calib-XXXX for ever; the
    next run removes it (its marker proves it a dead run's), and nothing it cannot prove."""
    from onnx import TensorProto, helper, numpy_helper

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    weight = numpy_helper.from_array(np.eye(256, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", [f"t{i}", "w"], [f"t{i + 1}"]) for i in range(60)]
    slow = helper.make_model(helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [256, 256])],
                                               [helper.make_tensor_value_info("t60", TensorProto.FLOAT, [256, 256])], [weight]),
                             opset_imports=[helper.make_opsetid("", 17)])
    slow.ir_version = 8
    onnx.save(slow, tmp_path / "slow.onnx")
    np.savez(tmp_path / "c.npz", t0=np.random.default_rng(0).random((200, 256, 256), dtype=np.float32))
    env = {**_env(), "TMPDIR": str(tmp)}
    # percentile calibration keeps its work directory for the whole run (minmax's one pass needs none)
    args = [sys.executable, "-m", "converter", "port", str(tmp_path / "slow.onnx"), "-t", "tflite", "--quantize",
            "int8", "--calibration-method", "percentile", "--calibration", str(tmp_path / "c.npz"),
            "-o", str(tmp_path / "o")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not list(tmp.glob("edgeconv-calib-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    left = list(tmp.glob("edgeconv-calib-*"))
    proc.kill()
    proc.wait()
    assert left and all(p.exists() for p in left), "calibration never started"
    users = tmp / "edgeconv-calib-1-mine"  # a name edgeconv would use, no marker: not edgeconv's
    users.mkdir()
    (users / "keep").write_text("mine")
    res = subprocess.run([*args[:-1], str(tmp_path / "o2")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    assert not any(p.exists() for p in left)
    assert (users / "keep").read_text() == "mine"


def test_16_bit_png_decodes_with_its_real_range(tmp_path):
    """Issue 28 #16: values >= 256 became 255 (white images, exit 0); now 0..65535 maps onto 0..255."""
    from converter.quantize.calibration import load_calibration
    from converter.quantize.preprocess import parse_spec

    values = np.random.default_rng(0).integers(256, 65536, (8, 8))
    hc.png16(tmp_path / "a.png", values)
    model = hc.image_model(np.random.default_rng(0))
    got = load_calibration(tmp_path, model, parse_spec("rgb,range=0-1"))
    x = got.samples[0]["x"]
    np.testing.assert_allclose(x[0], np.repeat((values / 65535.0)[None], 3, axis=0), rtol=0, atol=1e-6)
    assert x.max() < 1.0 and x.min() > 0.0 and len(np.unique(x)) > 32  # not all 255 (1.0)


def test_32_bit_images_and_decompression_bombs_are_one_line(tmp_path):
    from PIL import Image

    model = _conv_model(tmp_path / "m.onnx")
    for name, make in (("i32", lambda d: Image.fromarray(np.full((8, 8), 70000, np.int32)).save(d / "a.tif")),
                       ("bomb", lambda d: Image.new("L", (12000, 12000)).save(d / "a.png"))):
        d = tmp_path / name
        d.mkdir()
        make(d)
        res = _cli("port", model, "-t", "tflite", "--quantize", "int8", "--calibration", d, "--preprocess", "rgb",
                   "-o", tmp_path / f"o-{name}", cwd=tmp_path)
        line = _one_error_line(res)
        assert res.returncode == 2 and "not a decodable image" in line
        assert ("no fixed range" in line) if name == "i32" else ("decompression bomb" in line)


@pytest.mark.parametrize("spec", ["std=1e-50", "range=1e39-1e40", "mean=1e308,std=1e-308"])
def test_preprocess_numbers_float32_cannot_hold_blame_the_spec(tmp_path, spec):
    """Low: numpy RuntimeWarnings on stderr, then "sample 0 holds NaN or Inf" blamed the data."""
    import warnings

    from converter.errors import BadInput
    from converter.quantize.preprocess import parse_spec

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BadInput, match="float32 cannot hold"):
            parse_spec(spec)
    model = _conv_model(tmp_path / "m.onnx")
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    from PIL import Image

    Image.new("RGB", (8, 8), (10, 20, 30)).save(imgs / "a.png")
    res = _cli("port", model, "-t", "tflite", "--quantize", "int8", "--calibration", imgs, "--preprocess", spec,
               "-o", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 2 and "--preprocess" in _one_error_line(res) and "NaN or Inf" not in res.stderr
