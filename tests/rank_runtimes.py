"""The real TNN and MACE runtimes (``../shared/runtimes``, test oracles only; see its README),
through the package's own adapters (``converter/runtimes``): what users get with ``--runtime``
is what the tests use.  A test that needs a runtime skips, with the path it looked for, only
where the runtimes directory is absent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# The runtimes sit beside the checkout (``../shared/runtimes``); EDGECONV_TEST_RUNTIMES points elsewhere.
# Resolved (symlinks too), as edgeconv writes every path it records (reproduce.sh's --runtime):
# a test comparing the two compares resolved paths on both sides.
RUNTIMES = Path(os.environ.get("EDGECONV_TEST_RUNTIMES")
                or Path(__file__).resolve().parents[2] / "shared" / "runtimes").resolve()
TNN_RUN = RUNTIMES / "tnn" / "bin" / "tnn_run"
TNN_TEST = RUNTIMES / "tnn" / "bin" / "TNNTest"
MACE_RUN = RUNTIMES / "mace" / "bin" / "mace_run"


def need(tool: Path):
    if not tool.exists():
        pytest.skip(f"real runtime not present: {tool} (../shared/runtimes, see its README)")


def tnn_runtime(device: str | None = None):
    from converter.targets.tnn.runtime import TnnRun

    need(TNN_RUN)
    return TnnRun(TNN_RUN, device=device)


def mace_runtime():
    from converter.targets.mace.runtime import MaceRun

    need(MACE_RUN)
    return MaceRun(MACE_RUN)


def tnn_run(artifact, inputs: dict[str, np.ndarray], tmp: Path | None = None, device: str = "X86") -> dict[str, np.ndarray]:
    """Outputs of TNN's interpreter (``tnn_run``) by ONNX output name; a refusal fails the test."""
    from converter.runtimes import RuntimeRefused

    try:
        return tnn_runtime(device).run(artifact, inputs)
    except RuntimeRefused as err:
        raise AssertionError(str(err)) from None


def mace_run(artifact, inputs: dict[str, np.ndarray], tmp: Path | None = None) -> dict[str, np.ndarray]:
    """Outputs of MACE's own runner (``mace_run``, CPU) by ONNX output name, in ONNX layout."""
    from converter.runtimes import RuntimeRefused

    try:
        return mace_runtime().run(artifact, inputs)
    except RuntimeRefused as err:
        raise AssertionError(str(err)) from None


# -- many single-op cases in one runtime invocation ------------------------------------------------


def combine_models(models):
    """One ONNX model holding every model of ``models`` side by side (names prefixed ``c<i>_``),
    so that one runtime invocation runs them all (mace_run spends ~1 s per start measuring the CPU)."""
    import onnx
    from onnx import compose, helper

    nodes, ins, outs, inits = [], [], [], []
    for i, model in enumerate(models):
        prefixed = compose.add_prefix(model, f"c{i}_")
        nodes += prefixed.graph.node
        ins += prefixed.graph.input
        outs += prefixed.graph.output
        inits += prefixed.graph.initializer
    graph = helper.make_graph(nodes, "combined", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def prove_in_runtime(cases, export, run, compare, tmp: Path) -> dict[int, str]:
    """Run every case (``(model, feeds)``) in one invocation of a real runtime; returns
    {case index: failure} (empty when all match).  When the combined run fails, each case is run
    alone so that the failure names its op."""
    import onnxruntime as ort

    from converter.runtimes import RuntimeRefused

    def check(i, model, feeds, got, prefix=""):
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for out, want in zip(model.graph.output, ref):
            problem = compare(np.asarray(got[prefix + out.name]), want)
            if problem:
                return f"{out.name}: {problem}"
        return ""

    combined = combine_models([m for m, _ in cases])
    feeds = {f"c{i}_{k}": v for i, (_, f) in enumerate(cases) for k, v in f.items()}
    try:
        got = run(export(combined, tmp / "combined"), feeds)
    except RuntimeRefused:
        got = None
    failures = {}
    for i, (model, case_feeds) in enumerate(cases):
        if got is not None:
            problem = check(i, model, case_feeds, got, f"c{i}_")
        else:
            try:
                problem = check(i, model, case_feeds, run(export(model, tmp / f"case{i}"), case_feeds))
            except RuntimeRefused as err:
                problem = str(err)
        if problem:
            failures[i] = problem
    return failures


# -- every exporter test's file in the real runtime too ---------------------------------------------


def agree(reader: dict, runtime: dict, where: str, atol: float = 1e-5) -> None:
    """The real runtime computes what the reader computed (floats within ``atol``, ints exactly)."""
    for name, want in reader.items():
        assert name in runtime, f"{where}: the runtime returned no '{name}'"
        want, got = np.asarray(want), np.asarray(runtime[name])
        assert got.size == want.size, f"{where}: '{name}' has shape {list(got.shape)}, the reader {list(want.shape)}"
        got = got.reshape(want.shape)
        if want.dtype.kind == "f":
            err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
            assert err <= atol, f"{where}: '{name}' differs from the reader by {err:.3g} in the real runtime"
        else:
            assert np.array_equal(got.astype(np.int64), want.astype(np.int64)), f"{where}: '{name}' integers differ"


def real_runtime_fixture(framework: str, reader_only: dict[str, str] | None = None,
                         devices: dict[str, tuple[str, str]] | None = None):
    """An autouse fixture for an exporter test module: every ``TARGET.run`` (the reader) also
    runs the same files in the framework's real runtime and asserts they agree.  ``reader_only``:
    test name -> why its files are for the reader alone (e.g. deliberately edited files);
    ``devices``: TNN test name -> (device, why) where the x86 kernels cannot stand in for arm."""
    import importlib

    @pytest.fixture(autouse=True)
    def _also_in_real_runtime(request, monkeypatch):
        tool = TNN_RUN if framework == "tnn" else MACE_RUN
        names = (request.node.name, request.node.originalname)
        if not tool.exists() or any(n in (reader_only or {}) for n in names):
            yield
            return
        target = importlib.import_module(f"converter.targets.{framework}").TARGET
        reader_run = type(target).run
        device = next((devices[n][0] for n in names if n in (devices or {})), None)
        runtime = (tnn_runtime(device) if framework == "tnn" else mace_runtime())
        calls = []

        def both(self, artifact, inputs):
            from converter.runtimes import RuntimeRefused

            values = reader_run(self, artifact, inputs)
            try:
                real = runtime.run(artifact, inputs)
            except RuntimeRefused as err:
                raise AssertionError(f"{request.node.name}: {err}") from None
            agree(values, real, request.node.name)
            calls.append(artifact)
            return values

        monkeypatch.setattr(type(target), "run", both)
        yield
    return _also_in_real_runtime


def runtime_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    """Why a real runtime's output differs from onnxruntime's ("" when it matches: float within
    1e-5 absolute, integers equal)."""
    if got.size != want.size:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    got = got.reshape(want.shape)
    if want.dtype.kind == "f":
        err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
        return "" if err <= 1e-5 else f"max abs error {err:.3g}"
    return "" if np.array_equal(got.astype(np.int64), want.astype(np.int64)) else "integer values differ"
