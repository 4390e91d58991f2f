"""User-level QA of the ``edgeconv`` command: the promises of docs/usage.md "Exit codes".

Every error is exactly one line on stderr (``edgeconv: error: ...``), a documented exit code,
never a traceback, and no partial output left behind.  Each test runs the real console entry
point (``python -m converter`` -> ``converter.cli.run``) in a subprocess, as a user would.
Models are built here with onnx.helper: tiny, so the whole module stays fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
EXIT_BAD_INPUT, EXIT_UNSUPPORTED, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 3, 130, 143


def run_cli(*args, cwd=None, extra_path=None, timeout=300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), extra_path]))}
    env.pop("EDGECONV_DEBUG", None)
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "converter", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_one_error(res: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    lines = res.stderr.splitlines()
    assert res.returncode == code, (res.returncode, res.stderr)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("edgeconv: error: "), lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def save(path: Path, nodes, inputs, outputs, opsets=(("", 17),)) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8  # what onnxruntime reads for opset 17 (helper's default is newer)
    path.write_bytes(model.SerializeToString())
    return path


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("qa_models")
    x, y = tensor("x", [1, 3, 4, 4]), tensor("y", [1, 3, 4, 4])
    relu = save(d / "relu.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    return {
        "relu": relu,
        "dynamic": save(d / "dynamic.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                        [tensor("x", ["N", 3, "H", "W"])], [tensor("y", ["N", 3, "H", "W"])]),
        "cycle": save(d / "cycle.onnx", [helper.make_node("Add", ["x", "b"], ["a"]),
                                         helper.make_node("Relu", ["a"], ["b"]),
                                         helper.make_node("Relu", ["a"], ["y"])], [x], [y]),
        "opset_too_new": save(d / "new.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y], (("", 99),)),
        "custom_domain": save(d / "custom.onnx", [helper.make_node("Relu", ["x"], ["t"]),
                                                  helper.make_node("FancyOp", ["t"], ["y"], domain="com.acme")],
                              [x], [y], (("", 17), ("com.acme", 1))),
        "empty": _write(d / "empty.onnx", b""),
        "truncated": _write(d / "truncated.onnx", relu.read_bytes()[:40]),
        "wrong_extension": _write(d / "model.txt", relu.read_bytes()),
        "not_a_zip_pt": _write(d / "model.pt", b"definitely not a TorchScript archive"),
        "dir": _mkdir(d / "not_a_savedmodel"),
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


# --- bad input files -------------------------------------------------------------------------

@pytest.mark.parametrize("kind, fragment", [
    ("empty", "not a valid ONNX model"),
    ("truncated", "not a valid ONNX model"),
    ("wrong_extension", "unrecognized model file extension '.txt'"),
    ("not_a_zip_pt", "not a TorchScript archive"),
    ("dir", "not a TF SavedModel"),
    ("opset_too_new", "opset 99"),
    ("cycle", "the graph has a cycle"),
])
def test_bad_model_files_are_one_line_exit_2_and_write_nothing(models, kind, fragment, tmp_path):
    out = tmp_path / "out"
    line = assert_one_error(run_cli("port", models[kind], "--to", "tflite", "--hw", "cpu", "-o", out),
                            EXIT_BAD_INPUT, fragment)
    if kind != "opset_too_new":  # (normalize's opset message does not name the file yet)
        assert str(models[kind]) in line
    assert not out.exists()


def test_missing_model_file(tmp_path):
    assert_one_error(run_cli("inspect", tmp_path / "nope.onnx"), EXIT_BAD_INPUT, "no such file")


def test_dynamic_dims_without_input_shape_name_the_fix(models, tmp_path):
    out = tmp_path / "out"
    assert_one_error(run_cli("port", models["dynamic"], "-t", "tflite", "--hw", "cpu", "-o", out), EXIT_BAD_INPUT,
                     "dynamic dimension", "--input-shape x=")
    assert not out.exists()


# --- bad flags and values --------------------------------------------------------------------

@pytest.mark.parametrize("args, code, fragments", [
    (["check", "{relu}", "--to", "tflit"], EXIT_BAD_INPUT, ["unknown framework 'tflit'", "tflite"]),
    (["check", "{relu}", "--to", "tnn", "--hw", "gpuu"], EXIT_BAD_INPUT, ["unknown hardware 'gpuu'", "opencl"]),
    (["split", "{relu}", "--to", "tnn", "--hw", "npu", "-o", "{out}"], EXIT_BAD_INPUT,
     ["names several tnn hardware (huawei_npu, rknpu, apple_npu)"]),
    (["check", "{relu}", "--to", "tnn", "-s", "garbage"], EXIT_BAD_INPUT, ["--input-shape 'garbage'"]),
    (["check", "{relu}", "--tnn"], EXIT_BAD_INPUT, ["No such option: --tnn", "edgeconv check --help"]),
    (["batch", "{manifest}", "-j", "-1"], EXIT_BAD_INPUT, ["-j", "greater than or equal to 1"]),
    (["split", "{relu}", "--to", "mace", "--hw", "cpu", "-o", "{out}", "--max-outputs", "0"], EXIT_BAD_INPUT,
     ["--max-outputs"]),
    (["split", "{relu}", "--to", "mace", "--hw", "cpu", "-o", "{out}", "--move", "no_such_node"], EXIT_BAD_INPUT,
     ["--move no_such_node: no such node"]),
    (["split", "{relu}", "--to", "mace", "--hw", "cpu", "-o", "{out}", "--cpp-namespace", "bad ns"], EXIT_BAD_INPUT,
     ["--cpp-namespace 'bad ns'"]),
    (["frobnicate"], EXIT_BAD_INPUT, ["No such command 'frobnicate'"]),
])
def test_bad_flags_are_one_line_exit_2(models, tmp_path, args, code, fragments):
    manifest = tmp_path / "release.yaml"
    manifest.write_text(f"targets:\n  - {{to: tflite, hw: cpu}}\nmodels:\n  - path: {models['relu']}\n")
    out = tmp_path / "out"
    args = [a.format(relu=models["relu"], manifest=manifest, out=out) for a in args]
    assert_one_error(run_cli(*args), code, *fragments)
    assert not out.exists()


def test_manifest_missing_key_names_file_and_line(tmp_path):
    manifest = tmp_path / "release.yaml"
    manifest.write_text("targets:\n  - {to: tflite, hw: cpu}\nmodels:\n  - {name: x}\n")
    assert_one_error(run_cli("batch", manifest, "-o", tmp_path / "out"), EXIT_BAD_INPUT,
                     "release.yaml:4", "models.0.path")
    assert not (tmp_path / "out").exists()


def test_bare_edgeconv_prints_help():
    res = run_cli()
    assert res.returncode == 0 and res.stderr == ""
    assert "Usage: edgeconv" in res.stdout and "port" in res.stdout


# --- output paths ----------------------------------------------------------------------------

def test_output_dir_that_is_a_file(models, tmp_path):
    blocker = _write(tmp_path / "afile", b"keep me")
    assert_one_error(run_cli("port", models["relu"], "-t", "tnn", "--hw", "arm", "-o", blocker), EXIT_BAD_INPUT,
                     "afile", "is a file, not a directory")
    assert blocker.read_bytes() == b"keep me"
    assert_one_error(run_cli("normalize", models["relu"], "-o", blocker / "x.onnx"), EXIT_BAD_INPUT,
                     "is a file, not a directory")
    assert_one_error(run_cli("report", "-o", blocker / "page.html"), EXIT_BAD_INPUT, "is a file, not a directory")


def test_output_file_that_is_a_directory(models, tmp_path):
    assert_one_error(run_cli("normalize", models["relu"], "-o", tmp_path), EXIT_BAD_INPUT, "is a directory")
    assert files_under(tmp_path) == []


def test_output_in_unwritable_place(models, tmp_path):
    # /proc refuses new entries even for root, so this holds in CI containers too.
    assert_one_error(run_cli("port", models["relu"], "-t", "tnn", "--hw", "arm", "-o", "/proc/edgeconv-qa"),
                     EXIT_BAD_INPUT, "cannot write /proc/edgeconv-qa")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_output_in_read_only_directory(models, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_one_error(run_cli("port", models["relu"], "-t", "tnn", "--hw", "arm", "-o", ro / "out"),
                         EXIT_BAD_INPUT, "cannot write", "Permission denied")
        assert_one_error(run_cli("normalize", models["relu"], "-o", ro / "x.onnx"), EXIT_BAD_INPUT, "Permission denied")
        assert files_under(ro) == []
    finally:
        ro.chmod(0o755)


def test_failed_port_removes_the_directories_it_created(models, tmp_path):
    # The hook is imported inside the port (inside the atomic output directory): its failure
    # must not leave an empty out/deep/dir behind.
    out = tmp_path / "out" / "deep" / "dir"
    assert_one_error(run_cli("port", models["relu"], "-t", "tnn", "--hw", "arm", "-o", out,
                             "--retrain-hook", "no_such_module_qa:fit"), EXIT_BAD_INPUT, "no_such_module_qa")
    assert files_under(tmp_path) == []


def test_same_error_on_every_target_is_said_once(models, tmp_path):
    out = tmp_path / "out"
    assert_one_error(run_cli("port", models["relu"], "--to", "all", "--hw", "all", "-o", out,
                             "--retrain-hook", "no_such_module_qa:fit"), EXIT_BAD_INPUT, "no_such_module_qa")
    assert not out.exists()


# --- a successful run is quiet on stderr; tables survive a pipe --------------------------------

def test_tflite_port_is_quiet_on_stderr(models, tmp_path):
    """LiteRT prints "INFO: Created TensorFlow Lite XNNPACK delegate" from C++ on fd 2."""
    res = run_cli("port", models["relu"], "-t", "tflite", "--hw", "cpu", "-o", tmp_path / "out")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert (tmp_path / "out" / "relu.tflite").stat().st_size > 0


def test_piped_tables_keep_whole_cells(models):
    """Piped output (CI logs) must not cut cells ("…") nor squeeze them into 80 columns."""
    res = run_cli("plan", models["custom_domain"], "--to", "tflite", "--hw", "cpu")
    assert res.returncode == EXIT_UNSUPPORTED, res.stderr
    plan = json.loads(run_cli("plan", models["custom_domain"], "--to", "tflite", "--hw", "cpu", "--json").stdout)
    reason = next(e["reason"] for e in plan["plans"][0]["entries"] if e["op"] == "FancyOp")
    assert len(reason) > 80
    assert "…" not in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) > 100  # not folded to rich's 80 columns
    # Folded lines continue the same cell (the other cells are blank there): the text is whole.
    cells = "".join(res.stdout.replace("│", " ").split())
    assert "".join(reason.split()) in cells


def test_json_outputs_parse_and_are_stable(models):
    for args in (["check", models["relu"], "--to", "all", "--hw", "all", "--json"],
                 ["inspect", models["relu"], "--normalized", "--json"]):
        first, second = run_cli(*args), run_cli(*args)
        assert first.returncode in (0, EXIT_UNSUPPORTED) and first.stderr == "", first.stderr
        assert first.stdout == second.stdout
        assert json.loads(first.stdout)


# --- interrupts ------------------------------------------------------------------------------

@pytest.mark.parametrize("signum, code, word", [(signal.SIGINT, EXIT_INTERRUPTED, "interrupted"),
                                                (signal.SIGTERM, EXIT_TERMINATED, "terminated")])
def test_interrupt_mid_port_is_one_line_and_leaves_nothing(models, tmp_path, signum, code, word):
    marker = tmp_path / "hook-started"
    (tmp_path / "slow_hook_qa.py").write_text(textwrap.dedent(f"""
        import pathlib, time
        pathlib.Path({str(marker)!r}).write_text("started")
        time.sleep(120)
        def fit(blocks):
            return blocks
    """))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    env.pop("EDGECONV_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-m", "converter", "port", str(models["relu"]), "-t", "tnn",
                             "--hw", "arm", "-o", str(out), "--retrain-hook", "slow_hook_qa:fit"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():  # the port is now inside its atomic output directory
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_one_error(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), code, word)
    assert not out.exists()


# --- help is consistent across commands --------------------------------------------------------

def test_shared_options_are_spelled_the_same_everywhere():
    import typer

    from converter.cli import app

    root = typer.main.get_command(app)
    spelled: dict[str, set[tuple[str, ...]]] = {}
    for _name, command in root.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                spelled.setdefault(param.name, set()).add(tuple(sorted(param.opts)))
    assert spelled["to"] == {("--to", "-t")}
    assert spelled["hw"] == {("--hw",)}
    assert spelled["out"] == {("--out", "-o")}
    assert spelled["input_shape"] == {("--input-shape", "-s")}
    assert spelled["json_out"] == {("--json",)}
    assert spelled["matrix_path"] == {("--matrix",)}
    assert spelled["matrix_overlay"] == {("--matrix-overlay",)}
    every = {"to": {"check", "plan", "split", "port", "demo"},
             "out": {"normalize", "split", "port", "verify", "report", "batch", "demo"},
             "input_shape": {"inspect", "normalize", "check", "plan", "split", "port", "report", "verify"},
             "matrix_path": {"check", "plan", "split", "port", "report"}}
    for param, commands in every.items():
        have = {n for n, c in root.commands.items() if any(p.name == param for p in c.params)}
        assert have == commands, (param, have)


def test_demo_ports_its_torchscript_model(tmp_path):
    """The README's first command: TorchScript names inputs after forward()'s parameters."""
    pytest.importorskip("torch")
    res = run_cli("demo", "-o", tmp_path / "demo", "--model", "normalized_input", "-t", "tnn", "--hw", "arm")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    written = files_under(tmp_path / "demo" / "tnn-arm")
    assert "normalized_input.tnnproto" in written and "normalized_input.tnnmodel" in written


def test_console_script_exits_fast_but_runs_atexit_and_flushes_its_output(tmp_path):
    """``converter.cli.run`` ends with ``os._exit`` (no interpreter teardown): atexit handlers
    still run, everything printed reaches the pipe, the exit code is the command's."""
    model = tmp_path / "m.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    from onnx import save

    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    driver = textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: sys.stderr.write("atexit handler ran\\n"))
        sys.argv = ["edgeconv"] + sys.argv[1:]
        from converter.cli import run
        print("x" * 100000, end="")  # more than a pipe buffer: must be flushed, not dropped
        run()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("EDGECONV_DEBUG", None)
    done = subprocess.run([sys.executable, "-c", driver, "port", str(model), "--to", "tflite", "--hw", "cpu",
                           "--no-verify", "-o", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("x" * 100000) and "result" in done.stdout and done.stdout.endswith("┘\n")
    assert done.stderr == "atexit handler ran\n"
    done = subprocess.run([sys.executable, "-c", driver, "port", str(tmp_path / "missing.onnx"), "--to", "tflite"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr.splitlines()[0].startswith("edgeconv: error:") and done.stderr.endswith("atexit handler ran\n")
