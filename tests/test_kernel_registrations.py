"""The accelerator columns of the matrix, proved from the frameworks' implementations.

No GPU or NPU runs here, so a column is proved the way it can be:

* **Citations.**  Every op the matrix claims (supported or unverified) on MACE's GPU and TNN's
  OpenCL cites its kernel's registration (``sources: {gpu|opencl: ...}``): MACE's
  ``MACE_REGISTER_GPU_OP`` (or a ``RuntimeType::RT_OPENCL`` registration) under ``mace/ops/``,
  TNN's ``REGISTER_OPENCL_ACC`` under ``source/tnn/device/opencl/acc/``.  The quoted text
  (tests/data/citations.yaml; test_citations.py finds it on the cited lines of the pinned
  snapshot) must be a registration of a layer/op the exporter writes for that op.
* **Implementation over the doc table.**  Given the pinned snapshots (``EDGECONV_UPSTREAMS``, as
  in test_citations.py), every device registration of TNN's OpenCL, Metal, Huawei NPU, RKNPU
  and Apple NPU (CoreML) columns and of MACE's GPU is read from the source, and the matrix
  agrees with it: an op is claimed there exactly when every layer the exporter writes for it is
  registered, except the cells in ``NOT_BY_REGISTRATION``, each with the source line that says why.
* **The GPU files' graphs.**  Every case of the coverage tests whose op the GPU column supports
  is exported for the GPU and run on its own graph in the real CPU runtimes (``mace_run`` on the
  CPU twin of the GPU NetDef, ``tnn_run`` X86 on the OpenCL file): the GPU kernels themselves
  are not run here (tests/test_gpu_files.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import onnx
import pytest
import yaml

from converter.legalize.check import check_model
from converter.matrix import load_matrix
from converter.targets.base import ExportOptions
from converter.targets.tnn.layer_types import LAYER_TYPE
from rank_runtimes import MACE_RUN, TNN_RUN, mace_runtime, need, prove_in_runtime, runtime_mismatch, tnn_runtime

DATA = Path(__file__).parent / "data"
QUOTES = yaml.safe_load((DATA / "citations.yaml").read_text())["quotes"]
#: LayerType enum values of the layers the citations name (checked against layer_type.h below).
LAYER_ENUMS = yaml.safe_load((DATA / "tnn_layer_enums.yaml").read_text())["enums"]

#: TNN accelerator columns: where their implementation registers layers, and the macro it uses.
TNN_DEVICES = {
    "opencl": ("source/tnn/device/opencl/acc/", r"REGISTER_OPENCL_ACC"),
    "metal": ("source/tnn/device/metal/acc/", r"REGISTER_METAL_\w*ACC"),
    "huawei_npu": ("source/tnn/device/huawei_npu/convert/", r"REGISTER_NPU_LAYER"),
    "rknpu": ("source/tnn/device/rknpu/convert/", r"REGISTER_RKNPU_LAYER"),
    "apple_npu": ("source/tnn/network/coreml/", r"REGISTER_COREML_LAYER"),
}
TNN_REGISTRATION = re.compile(r"^(?P<off>//\s*)?(?P<macro>REGISTER_\w+)\((?P<cls>\w+),\s*(?P<layer>LAYER_\w+)\)")
MACE_REGISTRATION = re.compile(r'MACE_REGISTER_GPU_OP\(op_registry,\s*"(?P<a>\w+)"'
                               r'|MACE_REGISTER_OP(?:_BY_CLASS)?\(op_registry,\s*"(?P<b>\w+)",\s*\w+,\s*'
                               r"RuntimeType::RT_OPENCL")
#: The column each framework's GPU citations are for, and where its kernels live.
GPU_COLUMNS = {("tnn", "opencl"): "source/tnn/device/opencl/acc/", ("mace", "gpu"): "mace/ops/"}
#: Ops that write no layer of their own (nothing for a kernel to run).
NO_LAYER = {("tnn", "Identity"): "an alias of its input (layers_extra.py)",
            ("tnn", "Constant"): "a constant operand of the layer that reads it",
            ("mace", "Constant"): "a constant tensor of the op that reads it"}
#: Cells where a registered layer does not run the ONNX op, with the source line that says so.
NOT_BY_REGISTRATION = {
    ("tnn", "huawei_npu", "ArgMin"): "Tencent/TNN@f0cb081:source/tnn/device/huawei_npu/convert/"
                                     "npu_arg_max_or_min_layer_convert.cc#L41-L43 ('only support max by now')",
    ("mace", "gpu", "Equal"): "XiaoMi/mace@0fc55a5:mace/ops/opencl/image/eltwise.cc#L39-L40 "
                              "('Eltwise op on GPU does not support EQUAL')",
    ("tnn", "metal", "GridSample"): "unverified, not supported: Tencent/TNN@f0cb081:source/tnn/device/metal/acc/"
                                    "metal_grid_sample_layer_acc.mm#L23-L57 reads no mode/padding/align_corners",
}
#: How many ops each GPU column cites a registration for, and proves on the GPU file's graph.
CITED = {("tnn", "opencl"): 76, ("mace", "gpu"): 52}
PROVED = {("tnn", "opencl"): 75, ("mace", "gpu"): 45}
#: TNN ops whose x86 kernel computes them wrongly (the matrix's x86 notes): their OpenCL files'
#: graphs run on TNN's NAIVE device (the reference kernels) instead.
X86_KERNEL_WRONG = {"ReduceProd": "x86_compute.cc:584 starts every accumulator at 0 (the matrix's x86 note)"}


@cache
def matrix():
    return load_matrix()


def claimed(fw: str, hw: str) -> list[str]:
    m = matrix()
    return sorted(op for op in m.data["frameworks"][fw]["ops"] if m.op_status(fw, hw, op) != "unsupported")


def _cases(fw: str) -> list[tuple[str, onnx.ModelProto, dict]]:
    if fw == "tnn":
        from test_tnn_matrix_coverage import CASES

        return [(c.op, c.model, c.feeds) for c in CASES]
    from test_mace_matrix_coverage import CASES

    return [(op, model, feeds) for op, (model, feeds) in CASES.items()]


def _export(fw: str, model, path: Path, hw: str):
    from converter import targets

    return targets.get(fw).export(model, path, hw, ExportOptions(name="m"))


def _layer_types(fw: str, artifact) -> list[str]:
    if fw == "tnn":
        from test_tnn_helpers import layer_tokens

        return [t[0] for t in layer_tokens(artifact.files[0].read_text())]
    from converter.targets.mace._generated import mace_pb2

    multi = mace_pb2.MultiNetDef()
    multi.ParseFromString((artifact.out_dir / "m.pb").read_bytes())
    return [op.type for op in multi.net_def[0].op]


@cache
def written(fw: str, hw: str) -> dict[str, set[str]]:
    """op -> the layer (TNN) / op (MACE) types the exporter writes for its coverage cases; ops
    the exporter refuses (no case) -> the matrix's target names."""
    out: dict[str, set[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (op, model, _) in enumerate(_cases(fw)):
            out.setdefault(op, set()).update(_layer_types(fw, _export(fw, model, Path(tmp) / str(i), hw)))
    m = matrix()
    for op in m.data["frameworks"][fw]["ops"]:
        target = m.target_op(fw, op)
        if op not in out and target:
            out[op] = set(re.findall(r"\w+", target))
    return out


def _target_words(fw: str, op: str) -> set[str]:
    return set(re.findall(r"\w+", matrix().target_op(fw, op) or ""))


def _is_layer(enum: str, layer_type: str) -> bool:
    """Does the LayerType ``enum`` name the layer type string ``layer_type``?  (By value where
    edgeconv writes that layer, else by name: LSTMONNX, which the exporter does not write.)"""
    if layer_type in LAYER_TYPE:
        return LAYER_TYPE[layer_type] == LAYER_ENUMS[enum]
    return enum == "LAYER_" + layer_type.upper()


def _registered_name(fw: str, quote: str) -> str:
    """The layer enum (TNN) / op type (MACE) the quoted registration registers, or ''."""
    if fw == "tnn":
        found = TNN_REGISTRATION.match(quote)
        return "" if found is None or found["off"] else found["layer"]
    found = MACE_REGISTRATION.search(quote)
    return "" if found is None else (found["a"] or found["b"])


@pytest.mark.parametrize("fw, hw", sorted(GPU_COLUMNS))
def test_gpu_columns_cite_a_kernel_registration_of_every_claimed_op(fw, hw):
    m = matrix()
    cited = 0
    for op in claimed(fw, hw):
        if (fw, op) in NO_LAYER:
            continue
        text = (m.data["frameworks"][fw]["ops"][op].get("sources") or {}).get(hw)
        assert text, f"{fw} {hw} {op}: no kernel registration cited"
        citation = m.citation(text)
        assert citation.path.startswith(GPU_COLUMNS[(fw, hw)]), text
        name = _registered_name(fw, QUOTES[text])
        assert name, f"{text}: {QUOTES[text]!r} is not a registration"
        if fw == "tnn":
            assert any(_is_layer(name, t) for t in written(fw, hw)[op]), (op, name, written(fw, hw)[op])
        else:
            assert name in written(fw, hw)[op] | _target_words(fw, op), (op, name, written(fw, hw)[op])
        assert m.describe(fw, hw, op)["source"] == text  # what check and the report page cite
        cited += 1
    assert cited == CITED[(fw, hw)]


def test_a_gpu_cell_without_a_kernel_is_unsupported_and_says_why():
    m = matrix()
    equal = m.describe("mace", "gpu", "Equal")
    assert m.op_status("mace", "gpu", "Equal") == "unsupported"
    assert equal["source"] == "XiaoMi/mace@0fc55a5:mace/ops/opencl/image/eltwise.cc#L39-L40"
    assert QUOTES[equal["source"]] == "Eltwise op on GPU does not support EQUAL"


# -- the implementation, read from the pinned snapshots ---------------------------------------------


def _snapshot(repo: str) -> Path:
    root = os.environ.get("EDGECONV_UPSTREAMS")
    if not root:
        pytest.skip("EDGECONV_UPSTREAMS not set: the registrations are read from the pinned TNN/MACE snapshots "
                    "(test_citations.py's layout); without them the citations above are what is checked")
    base = Path(root) / repo.replace("/", "+")
    for candidate in (base / "repo", base):
        if candidate.is_dir():
            return candidate
    pytest.fail(f"EDGECONV_UPSTREAMS={root} has no clone of {repo} ({base})")


def _git(repo: str, *args: str) -> str:
    res = subprocess.run(["git", "-C", str(_snapshot(repo)), *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


@cache
def _tnn_enums() -> dict[str, int]:
    """LayerType enum name -> value, and layer type string -> value (layer_type.h / layer_type.cc)."""
    commit = matrix().upstreams["Tencent/TNN"]
    enums = {k: int(v) for k, v in re.findall(r"(LAYER_\w+)\s*=\s*(\d+)",
                                               _git("Tencent/TNN", "show", f"{commit}:source/tnn/core/layer_type.h"))}
    names = re.findall(r'\{"(\w+)",\s*(LAYER_\w+)\}', _git("Tencent/TNN", "show", f"{commit}:source/tnn/core/layer_type.cc"))
    return {**enums, **{name: enums[enum] for name, enum in names}}


def _tnn_registrations(hw: str) -> set[int]:
    commit = matrix().upstreams["Tencent/TNN"]
    path, macro = TNN_DEVICES[hw]
    enums = _tnn_enums()
    found = set()
    for line in _git("Tencent/TNN", "grep", "-h", "-E", rf"^\s*{macro}\(", commit, "--", path).splitlines():
        reg = TNN_REGISTRATION.match(line.split(":", 1)[1].strip() if line.startswith(commit) else line.strip())
        if reg and re.fullmatch(macro, reg["macro"]):
            found.add(enums[reg["layer"]])
    return found


def _mace_gpu_registrations() -> set[str]:
    commit = matrix().upstreams["XiaoMi/mace"]
    text = _git("XiaoMi/mace", "grep", "-h", "-A1", "-E", "MACE_REGISTER_(GPU_OP|OP_BY_CLASS|OP)\\(", commit, "--",
                "mace/ops/")
    return {m["a"] or m["b"] for m in MACE_REGISTRATION.finditer(re.sub(r"\n\s*", " ", text))}


def test_layer_enums_are_tnns():
    """The enum values the citations are read with, and edgeconv's own type strings, are TNN's."""
    enums = _tnn_enums()
    assert {k: enums[k] for k in LAYER_ENUMS} == LAYER_ENUMS
    assert {t: enums[t] for t in LAYER_TYPE if not t.startswith(("Quantized", "BlobScale"))} == \
        {t: v for t, v in LAYER_TYPE.items() if not t.startswith(("Quantized", "BlobScale"))}


def _disagreements(fw: str, hw: str, registered) -> dict[str, str]:
    """op -> how the matrix and the registrations disagree on ``hw``."""
    m = matrix()
    problems = {}
    cases = {op: model for op, model, _ in _cases(fw)}
    for op, layers in written(fw, hw).items():
        if (fw, op) in NO_LAYER or (fw, hw, op) in NOT_BY_REGISTRATION:
            continue
        names = {_tnn_enums().get(t, -1) for t in layers} if fw == "tnn" else layers
        is_registered = bool(names) and names <= registered
        status = m.op_status(fw, hw, op)
        if status == "unsupported" and is_registered and op in cases:
            problems[op] = f"registered ({sorted(layers)}) but the matrix says unsupported"
        elif status != "unsupported" and not is_registered:
            # a node constraint may limit the claim to what is registered (Clip(0, 6) as ReLU6 on the RKNPU)
            if op in cases and not check_model(onnx.shape_inference.infer_shapes(cases[op]), fw, hw, m).ok:
                continue
            problems[op] = f"{status} but {sorted(layers)} not all registered"
    return problems


@pytest.mark.parametrize("hw", sorted(TNN_DEVICES))
def test_tnn_accelerator_column_agrees_with_its_registrations(hw):
    assert _disagreements("tnn", hw, _tnn_registrations(hw)) == {}


def test_mace_gpu_column_agrees_with_its_registrations():
    assert _disagreements("mace", "gpu", _mace_gpu_registrations()) == {}


def test_the_exceptions_are_still_exceptions():
    """Each NOT_BY_REGISTRATION cell has its layer registered (else it would need no exception)
    and is not supported."""
    regs = {("tnn", hw): _tnn_registrations(hw) for hw in TNN_DEVICES}
    regs[("mace", "gpu")] = _mace_gpu_registrations()
    for (fw, hw, op), why in NOT_BY_REGISTRATION.items():
        layers = written(fw, hw)[op]
        names = {_tnn_enums().get(t, -1) for t in layers} if fw == "tnn" else layers
        assert names <= regs[(fw, hw)], (fw, hw, op)
        assert matrix().op_status(fw, hw, op) != "supported", (fw, hw, op, why)


# -- the GPU files' graphs in the real CPU runtimes --------------------------------------------------


def _gpu_shaped_cases(fw: str) -> list[tuple[str, onnx.ModelProto, dict]]:
    """Cases in the shapes the GPU kernels take, for ops whose coverage case is outside them
    (MACE: channel Concat, depthwise deconvolution, H+W reductions, channel Softmax; TNN: 4-D Tile)."""
    if fw == "tnn":
        from test_tnn_matrix_coverage import I64, one, x

        tile = one("Tile", {"x": x(1, 2, 3, 2)}, inits={"r": I64(1, 2, 1, 3)})
        return [(tile.op, tile.model, tile.feeds)]
    from test_mace_matrix_coverage import F, _case, _i64, _node_model, _unary, _w

    cases = {
        "Concat": _case(_node_model("Concat", [("a", F, [1, 4, 3, 5]), ("b", F, [1, 4, 3, 5])], [("y", F, [1, 8, 3, 5])],
                                    axis=1)),
        "ConvTranspose": _case(_node_model("ConvTranspose", [("x", F, [1, 4, 5, 4])], [("y", F, [1, 4, 9, 7])],
                                           [("w", _w(4, 1, 3, 3)), ("b", _w(4, seed=2))], group=4, strides=[2, 2],
                                           pads=[1, 1, 1, 1])),
        "Softmax": _case(_unary("Softmax", (1, 5, 3, 4), axis=1)),
        "ReduceSum": _case(_node_model("ReduceSum", [("x", F, [1, 3, 4, 5])], [("y", F, [1, 3, 1, 1])],
                                       [("ax", _i64(2, 3))], keepdims=1)),
    }
    for op in ("ReduceMax", "ReduceMin", "ReduceProd"):
        cases[op] = _case(_unary(op, (1, 3, 4, 5), (1, 3, 1, 1), axes=[2, 3], keepdims=1))
    return [(op, model, feeds) for op, (model, feeds) in cases.items()]


def _gpu_cases(fw: str, hw: str):
    m = matrix()
    return [(op, model, feeds) for op, model, feeds in _cases(fw) + _gpu_shaped_cases(fw)
            if m.op_status(fw, hw, op) == "supported" and model.opset_import[0].version == 17
            and check_model(onnx.shape_inference.infer_shapes(model), fw, hw, m).ok]


@pytest.mark.parametrize("fw, hw", sorted(GPU_COLUMNS))
def test_gpu_column_ops_run_on_the_gpu_files_graph(fw, hw, tmp_path):
    need(TNN_RUN if fw == "tnn" else MACE_RUN)
    cases = _gpu_cases(fw, hw)
    runs = ([(tnn_runtime("X86"), [c for c in cases if c[0] not in X86_KERNEL_WRONG]),
             (tnn_runtime("NAIVE"), [c for c in cases if c[0] in X86_KERNEL_WRONG])] if fw == "tnn"
            else [(mace_runtime(), cases)])
    for k, (runtime, picked) in enumerate(runs):
        failures = prove_in_runtime([(model, feeds) for _, model, feeds in picked],
                                    lambda model, path: _export(fw, model, path, hw), runtime.run, runtime_mismatch,
                                    tmp_path / str(k))
        assert not failures, {picked[i][0]: why for i, why in failures.items()}
    assert len({op for op, _, _ in cases}) == PROVED[(fw, hw)]
