"""op_support_matrix.yaml: schema, aliases, overlays, and entry-by-entry agreement with the vendors' docs.

The cross-checks parse the reference documents here, independently of the matrix loader, and
compare every entry: TNN's device table, MACE's kernel registrations / op list / device
converter lists, TFLite's builtin list and its delegates' op tables, Core ML's MIL op list.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from converter.errors import BadInput
from converter.matrix import DEFAULT_MATRIX, load_matrix

REF = (Path(__file__).resolve().parents[1] / "../shared/reference").resolve()
needs_reference = pytest.mark.skipif(not REF.is_dir(), reason="shared/reference not present")

#: The ONNX ops most common in CNN, detection, segmentation and transformer models.
CORE_OPS = """Conv ConvTranspose BatchNormalization InstanceNormalization LayerNormalization LpNormalization LRN
Relu LeakyRelu PRelu Clip Sigmoid HardSigmoid HardSwish Tanh Elu Selu Softplus Erf Softmax LogSoftmax
Add Sub Mul Div Pow Sqrt Reciprocal Exp Log Abs Neg Floor Ceil Round Sin Cos Sign Max Min Sum Equal Greater
Less Not Where MatMul Gemm Einsum MaxPool AveragePool GlobalAveragePool GlobalMaxPool Flatten Reshape
Transpose Squeeze Unsqueeze Concat Split Slice Gather GatherND ScatterND Expand Tile Pad Resize Upsample
DepthToSpace SpaceToDepth ReduceMean ReduceMax ReduceMin ReduceSum ReduceProd ReduceL2 ArgMax ArgMin TopK
NonMaxSuppression CumSum Cast Shape ConstantOfShape Range OneHot NonZero Constant Identity Dropout LSTM GRU
RoiAlign GridSample""".split()

HARDWARE = {
    "tflite": ["cpu", "gpu", "nnapi", "edgetpu"],
    "tnn": ["arm", "x86", "opencl", "metal", "huawei_npu", "cuda", "naive", "openvino", "rknpu", "apple_npu"],
    "mace": ["cpu", "gpu", "dsp", "apu"],
    "coreml": ["cpu", "gpu", "ane"],
}


@pytest.fixture(scope="module")
def m():
    return load_matrix()


def _status(m, fw, hw, op):
    return m.op_status(fw, hw, op)


# ------------------------------------------------------------------ structure and API


def test_frameworks_and_hardware(m):
    assert {fw: m.hardware(fw) for fw in m.frameworks} == HARDWARE


def test_core_ops_covered_everywhere(m):
    assert len(CORE_OPS) >= 60
    for fw in m.frameworks:
        missing = [op for op in CORE_OPS if op not in m.ops(fw)]
        assert missing == [], f"{fw} lacks entries for {missing}"
        for hw in m.hardware(fw):
            for op in CORE_OPS:
                assert _status(m, fw, hw, op) in ("supported", "unverified", "unsupported")


def test_properties_have_required_keys(m):
    for fw in m.frameworks:
        for hw in m.hardware(fw):
            props = m.properties(fw, hw)
            assert {"max_outputs", "dtypes", "max_rank", "dynamic_shapes"} <= set(props)
            assert props["max_outputs"] is None or props["max_outputs"] >= 1
            assert props["dtypes"], (fw, hw)


def test_every_source_is_a_pinned_citation(m):
    """Every source links to a line of an upstream file at a pinned commit (tests/test_citations.py
    checks the lines themselves)."""
    cited = m.citations()
    assert len(cited) >= 100
    for text, citation in cited.items():
        assert citation.pinned == m.upstreams[citation.repo], text
        assert citation.url.startswith(f"https://github.com/{citation.repo}/blob/{citation.pinned}/"), text
    assert {c.repo for c in cited.values()} >= {"google-ai-edge/LiteRT", "Tencent/TNN", "XiaoMi/mace",
                                                 "apple/coremltools"}


def test_resolve_hw_words(m):
    assert m.resolve_hw("coreml", "npu") == "ane"
    assert m.resolve_hw("coreml", "Neural_Engine") == "ane"
    assert m.resolve_hw("tflite", "npu") == "nnapi"
    assert m.resolve_hw("tflite", "coral") == "edgetpu"
    assert m.resolve_hw("mace", "hexagon") == "dsp"
    assert m.resolve_hw("tnn", "armv8") == "arm"
    with pytest.raises(BadInput) as err:
        m.resolve_hw("tnn", "npu")  # one hardware asked for, several named
    assert str(err.value) == "'npu' names several tnn hardware (huawei_npu, rknpu, apple_npu); this needs one of them"
    with pytest.raises(BadInput) as err:
        m.resolve_hw("mace", "npu")
    assert "dsp, apu" in str(err.value)
    # A class word names every hardware of its class (the commands port to each).
    assert m.resolve_hw_words("tnn", "npu") == ["huawei_npu", "rknpu", "apple_npu"]
    assert m.resolve_hw_words("tnn", "GPU") == ["opencl", "metal", "cuda"]
    assert m.resolve_hw_words("mace", "npu") == ["dsp", "apu"]
    assert m.resolve_hw_words("tflite", "npu") == ["nnapi"]
    assert m.resolve_targets("tnn", "npu") == [("tnn", "huawei_npu"), ("tnn", "rknpu"), ("tnn", "apple_npu")]
    assert ("mace", "dsp") in m.resolve_targets("all", "npu") and ("coreml", "ane") in m.resolve_targets("all", "npu")
    with pytest.raises(BadInput) as err:
        m.resolve_hw("tflite", "fpga")
    assert str(err.value) == "unknown hardware 'fpga' for tflite; choose one of: cpu, gpu, nnapi, edgetpu"
    assert len(m.resolve_targets("all", "all")) == 21
    assert m.resolve_targets("TNN", "npu_huawei".replace("npu_huawei", "hiai")) == [("tnn", "huawei_npu")]
    with pytest.raises(BadInput, match="unknown framework 'onnxrt'"):
        m.resolve_framework("onnxrt")


def test_target_op_and_supports_op(m):
    assert m.target_op("tnn", "ConvTranspose") == "Deconvolution"
    assert m.target_op("tflite", "Gemm") == "FULLY_CONNECTED"
    assert m.target_op("coreml", "LayerNormalization") == "layer_norm"
    assert m.target_op("tflite", "NoSuchOp") is None
    assert m.supports_op("tnn", "rknpu", "ConvTranspose") is False
    assert m.supports_op("tnn", "arm", "ConvTranspose") is True
    assert m.supports_op("coreml", "ane", "Conv") is True  # unverified counts as not blocked
    assert m.op_status("coreml", "ane", "Conv") == "unverified"
    assert m.op_status("coreml", "ane", "LSTM") == "unsupported"


# ------------------------------------------------------------------ validation errors point at lines


def _write(tmp_path, text, name="bad.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("mutate,needle,message", [
    (lambda t: t.replace("Relu: {target: RELU, supported: all}", "Relu: {target: RELU, supported: [cpu, fpga]}"),
     "Relu: {target: RELU, supported: [cpu, fpga]}", "unknown hardware 'fpga'"),
    (lambda t: t.replace("      Tanh: {target: TANH, supported: all}",
                         "      Tanh: {target: TANH, supported: all, constraints: [{rank: 0, below: 4}]}"),
     "Tanh: {target: TANH, supported: all, constraints", "unknown key(s) ['below']"),
    (lambda t: t.replace("      Tanh: {target: TANH, supported: all}",
                         "      Tanh: {target: TANH, supported: all, constraints: [{python: 'x < 4'}]}"),
     "Tanh: {target: TANH, supported: all, constraints", "needs exactly one of attr, rank"),
    (lambda t: t.replace("      Tanh: {target: TANH, supported: all}",
                         "      Tanh: {target: TANH, supported: all}\n      Tanh: {target: TANH, supported: all}"),
     "      Tanh: {target: TANH, supported: all}\n", "duplicate key 'Tanh'"),
    (lambda t: t.replace("      Tanh: {target: TANH, supported: all}",
                         "      Tanh: {target: TANH, supported: all, may_stay_on_cpu: {edgetpu: {why: slow}}}"),
     "Tanh: {target: TANH, supported: all, may_stay_on_cpu", "must be {why: <the vendor's words>, source: <citation>}"),
])
def test_mistakes_point_at_the_yaml_line(tmp_path, mutate, needle, message):
    text = DEFAULT_MATRIX.read_text()
    bad = mutate(text)
    assert bad != text
    path = _write(tmp_path, bad)
    with pytest.raises(BadInput) as err:
        load_matrix(path)
    line = _line_of(bad, needle.splitlines()[0]) + (1 if message.startswith("duplicate") else 0)
    assert str(err.value).startswith(f"bad.yaml:{line}:"), str(err.value)
    assert message in str(err.value)


def test_missing_max_outputs_is_an_error(tmp_path):
    text = DEFAULT_MATRIX.read_text().replace(
        "properties: {max_outputs: null, dtypes: [float32], max_rank: null, dynamic_shapes: true}\n      openvino",
        "properties: {dtypes: [float32], max_rank: null, dynamic_shapes: true}\n      openvino")
    path = _write(tmp_path, text)
    with pytest.raises(BadInput, match=r"naive.properties: needs 'max_outputs'"):
        load_matrix(path)


def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(BadInput, match=r"^bad.yaml:\d+: invalid YAML: "):
        load_matrix(_write(tmp_path, "version: 1\nframeworks: {a: 1\n  b: [\n"))
    with pytest.raises(BadInput, match="matrix file not found"):
        load_matrix(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ overlays


def test_overlay_adds_a_chip_and_overrides_an_entry(tmp_path):
    overlay = _write(tmp_path, """
frameworks:
  tflite:
    hardware:
      mali_g78:
        title: Mali-G78 via the GPU delegate
        source: google-ai-edge/LiteRT@f674577:tflite/delegates/gpu/common/model_builder.cc#L3080-L3287
        like: gpu
        aliases: [mali]
        properties: {max_outputs: 1, dtypes: [float16], max_rank: 4, dynamic_shapes: false}
  tnn:
    ops:
      ConvTranspose:
        supported: [arm, rknpu]
        source: Tencent/TNN@f0cb081:doc/en/user/support_en.md#L92
""", "overlay.yaml")
    m = load_matrix(overlays=[overlay])
    assert m.hardware("tflite")[-1] == "mali_g78"
    assert m.resolve_hw("tflite", "mali") == "mali_g78"
    assert m.properties("tflite", "mali_g78")["max_outputs"] == 1
    for op in ("Conv", "Ceil", "Transpose", "GatherND"):  # inherits the gpu column
        assert m.op_status("tflite", "mali_g78", op) == m.op_status("tflite", "gpu", op)
    assert m.op_status("tnn", "rknpu", "ConvTranspose") == "supported"
    assert m.op_status("tnn", "x86", "ConvTranspose") == "unsupported"  # list replaced, not merged
    assert m.target_op("tnn", "ConvTranspose") == "Deconvolution"       # other keys kept
    base = load_matrix()
    assert base.op_status("tnn", "rknpu", "ConvTranspose") == "unsupported"


def test_overlay_error_names_the_overlay_file(tmp_path):
    overlay = _write(tmp_path, "frameworks:\n  tnn:\n    ops:\n      Conv:\n        supported: [arm, tpu9]\n",
                     "mine.yaml")
    with pytest.raises(BadInput, match=r"^mine.yaml:5: frameworks.tnn.ops.Conv.supported.1: unknown hardware 'tpu9'"):
        load_matrix(overlays=[overlay])


# ------------------------------------------------------------------ TNN: doc/en/user/support.md


def _tnn_table():
    """{onnx_op: set(devices with 'yes')} read as users read it (short rows end in blanks)."""
    text = (REF / "tnn/doc_en_user_support_en.md").read_text()
    section = text.split("## TNN supported operators")[1].split("## TNN supported devices")[0]
    header = None
    per_op: dict[str, set] = {}
    rows_seen: dict[str, list] = {}
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "TNN Operators":
            header = cells[2:]
            continue
        tnn_op, onnx_ops, values = cells[0], cells[1], cells[2:]
        values += [""] * (len(header) - len(values))
        yes = {h for h, v in zip(header, values) if v.lower() == "yes"}
        if "+" in onnx_ops or "1D" in tnn_op or "3D" in tnn_op:
            continue  # fusions and 1D/3D variants are checked as constraints below
        for name in re.split(r"[/,]", onnx_ops):
            name = re.sub(r"\(.*?\)", "", name).strip()
            if name:
                per_op.setdefault(name, set()).update(yes)
                rows_seen.setdefault(name, []).append(tnn_op)
    return header, per_op


TNN_COLUMN = {"Naive": "naive", "armv7": "arm", "armv8": "arm", "opencl": "opencl", "metal": "metal",
              "Huawei_Npu": "huawei_npu", "CUDA": "cuda", "x86": "x86", "OpenVINO": "openvino",
              "RKNPU": "rknpu", "Apple NPU": "apple_npu"}


#: Cells where TNN's own implementation (Tencent/TNN f0cb081) contradicts its device table; the matrix
#: follows the implementation (issue 30: a layer the source registers for a device wins over a blank
#: cell; a layer the table lists but the source does not register is unsupported, citing both).
#: Each exception is explicit: op -> (devices added, devices removed, the citation the matrix note
#: of those devices must carry: one text, or {hw: text}).  Nothing else may differ from the table.
#: tests/test_kernel_registrations.py reads the registrations of the accelerator columns from the
#: pinned source and checks the whole columns against them.
TNN_TABLE_EXCEPTIONS = {
    "Split": ({"naive"}, set(), "cpu_splitv_layer_acc.cc:86"),      # REGISTER_CPU_ACC(SplitV, ...)
    "Squeeze": ({"naive"}, set(), "cpu_squeeze_layer_acc.cc:41"),   # REGISTER_CPU_ACC(Squeeze, ...)
    # onehot_layer.cc:81 reads the values from input_blobs_[1] (the int32 depth) and fails the float
    # check at :84-85: a constant-depth OneHot cannot initialize on any device.
    "OneHot": (set(), {"cuda", "naive"}, "onehot_layer.cc:67-85"),
    # Where TNN's own runtime (tnn_run, ../shared/runtimes) refuses or miscomputes what the table
    # lists: tests/test_tnn_matrix_coverage.py runs every case there.
    "Softsign": (set(), {"naive"}, "measured in tnn_run"),
    "ConstantOfShape": ({"apple_npu"}, {"naive"}, {"naive": "measured in tnn_run",
                                                  "apple_npu": "coreml_constantofshape_layer.cc:64"}),
    "GatherND": (set(), {"naive"}, "measured in tnn_run"),
    "Range": (set(), {"naive"}, "measured in tnn_run"),
    "Shape": (set(), {"naive"}, "measured in tnn_run"),
    "NonZero": (set(), {"naive"}, "measured in tnn_run"),
    "ReduceProd": (set(), {"x86"}, "x86_compute.cc:584"),
    "LRN": (set(), {"x86"}, "x86_lrn_layer_acc.cc:47-61"),
    # Registered for a device whose table cell is blank (REGISTER_RKNPU_LAYER / REGISTER_COREML_LAYER /
    # REGISTER_OPENCL_ACC / REGISTER_METAL_ACC): the implementation wins.
    "Add": ({"rknpu"}, set(), "math/rknpu_add_layer.cc:32"),
    "AveragePool": ({"rknpu"}, set(), "rknpu_pooling_layer.cc:58"),
    "Flatten": ({"rknpu", "apple_npu"}, set(), {"rknpu": "rknpu_flatten_layer.cc:41",
                                               "apple_npu": "coreml_flatten_layer.cc:73"}),
    "Reshape": ({"rknpu"}, set(), "rknpu_reshape_layer.cc:98"),
    "Sqrt": ({"rknpu"}, set(), "math/rknpu_sqrt_layer.cc:32"),
    "Transpose": ({"rknpu"}, set(), "rknpu_permute_layer.cc:44"),
    "MaxPool": ({"apple_npu"}, set(), "coreml_pool_layer.cc:125"),
    "Tanh": ({"apple_npu"}, set(), "coreml_tanh_layer.cc:54"),
    "InstanceNormalization": ({"apple_npu"}, set(), "coreml_instance_norm_layer.cc:130"),
    "LSTM": ({"apple_npu"}, set(), "coreml_lstm_layer.cc:825"),
    "Expand": ({"opencl"}, set(), "opencl_expand_layer_acc.cc:192"),
    "Tile": ({"opencl", "metal"}, set(), {"opencl": "opencl_tile_layer_acc.cc:102", "metal": "metal_tile_layer_acc.mm:104"}),
    "GridSample": ({"opencl"}, set(), "opencl_gridsample_layer_acc.cc:117"),
    # Listed by the table, registered nowhere in the device's source (the note cites the table's row
    # and the source: a commented-out registration, or the directory that has none).
    "Elu": (set(), {"rknpu"}, "rknpu_activation_layer.cc:116"),
    "Exp": (set(), {"rknpu"}, "support_en.md:102"),
    "Min": (set(), {"rknpu"}, "support_en.md:124"),
    "Tan": (set(), {"apple_npu"}, "support_en.md:185"),
}


@needs_reference
def test_tnn_agrees_with_support_table(m):
    header, table = _tnn_table()
    assert [TNN_COLUMN[h] for h in header] == ["naive", "arm", "arm", "opencl", "metal", "huawei_npu", "cuda",
                                               "x86", "openvino", "rknpu", "apple_npu"]
    onnx_names = {op.lower(): op for op in m.ops("tnn")}
    compared = 0
    for name, devices in table.items():
        op = onnx_names.get(name.lower())
        if op is None:
            continue  # PyTorch-only / TFLite-only / custom rows (PriorBox, Rsqrt, Inverse, ...)
        expected = {TNN_COLUMN[d] for d in devices}
        if "arm" in expected:  # both ARM columns must agree for the merged `arm` column
            assert {"armv7", "armv8"} <= devices, name
        if op in TNN_TABLE_EXCEPTIONS:
            added, removed, citation = TNN_TABLE_EXCEPTIONS[op]
            assert not added & expected and removed <= expected, f"{op}: the exception no longer applies"
            expected = (expected | added) - removed
            for hw in added | removed:
                text = citation[hw] if isinstance(citation, dict) else citation
                assert text in (m.op_rule("tnn", hw, op).note or ""), (op, hw)
        actual = {hw for hw in m.hardware("tnn") if _status(m, "tnn", hw, op) == "supported"}
        assert actual == expected, f"{op}: matrix {sorted(actual)} vs TNN table {sorted(expected)}"
        compared += 1
    assert compared >= 85
    # Blank cells: unsupported unless the device's source registers the layer (issue 30 changed the
    # earlier rule, under which RKNPU's Reshape and Transpose were unsupported too).
    assert _status(m, "tnn", "rknpu", "ConvTranspose") == "unsupported"  # no RKNPU Deconvolution converter
    for op in ("Reshape", "Transpose", "Flatten", "Add"):
        assert _status(m, "tnn", "rknpu", op) == "supported"
        assert m.describe("tnn", "rknpu", op)["source"].startswith("Tencent/TNN@f0cb081:source/tnn/device/rknpu/convert/")
    assert all(_status(m, "tnn", hw, "Dropout") == "unsupported" for hw in m.hardware("tnn"))
    assert _status(m, "tnn", "naive", "Split") == "supported"  # the table's blank, overruled by the kernel
    assert _status(m, "tnn", "rknpu", "Split") == "unsupported"


@needs_reference
def test_tnn_1d_3d_rows_become_rank_constraints(m):
    text = (REF / "tnn/doc_en_user_support_en.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| Convolution3D  "))
    cells = [c.strip() for c in row.strip().strip("|").split("|")][2:]
    assert [c for c in cells if c] == ["yes", "yes"]  # Naive and CUDA only
    # ... and edgeconv's exporter writes 2-D Convolution layers only: rank 4 everywhere, 1-D/3-D
    # convolutions are rewritten (converter/legalize/rewrites/conv_nd.py).
    for hw in ("arm", "opencl", "rknpu", "naive", "cuda"):
        texts = [c["text"] for c in m.describe("tnn", hw, "Conv")["constraints"]]
        assert any(t.startswith("rank == 4 (input 0) (the exporter writes 2-D Convolution layers only") for t in texts)


# ------------------------------------------------------------------ MACE


def _mace_registrations():
    regs = {}
    for line in (REF / "mace/op_registrations.txt").read_text().splitlines():
        parts = line.split()
        if parts:
            regs[parts[0]] = set(parts[1:])
    return regs


def _mace_types(target: str | None) -> list[str]:
    if not target or target.startswith("("):
        return []
    return [re.sub(r"\s*\(.*\)", "", t).strip() for t in target.split("/")]


def _mace_device_list(label: str) -> set:
    text = (REF / "mace/FORMAT-NOTES.md").read_text()
    para = text.split(label, 1)[1].split("\n* ", 1)[0]
    body = para.split("):", 1)[1]
    names = {w.strip(" .\n") for w in re.sub(r"\(\+Squeeze→Reshape\)\..*", "", body, flags=re.S).split(",")}
    if "(+Squeeze→Reshape)" in body:
        names.add("Squeeze")  # the APU converter turns Squeeze into Reshape
    return {n for n in names if n}


@needs_reference
def test_mace_agrees_with_kernel_registrations(m):
    regs = _mace_registrations()
    compared = 0
    for op in m.ops("mace"):
        types = _mace_types(m.target_op("mace", op))
        types = [t for t in types if t not in ("Eltwise", "Activation", "Reduce") or t in regs]
        if not types:
            continue
        cpu, gpu = _status(m, "mace", "cpu", op), _status(m, "mace", "gpu", op)
        if cpu == "supported":
            assert any("CPU-float" in regs.get(t, ()) for t in types), f"{op}: no CPU kernel for {types}"
        if gpu == "supported":
            assert all("GPU" in regs.get(t, ()) for t in types if t != "MatMul"), f"{op}: no GPU kernel for {types}"
        if types and not any("GPU" in regs.get(t, ()) for t in types):
            assert gpu == "unsupported", f"{op}: matrix says {gpu} on gpu but {types} have no GPU kernel"
        compared += 1
    assert compared >= 45


@needs_reference
def test_mace_cpu_only_remarks(m):
    """op_lists.rst: rows whose remark says 'Only CPU' must not be supported on the GPU."""
    text = (REF / "mace/docs_user_guide_op_lists.rst").read_text()
    cpu_only = {row[0] for row in csv.reader(line.strip() for line in text.splitlines() if line.strip().startswith('"'))
                if "Only CPU" in row[2] or "CPU is supported" in row[2]}
    assert {"MATMUL", "TRANSPOSE", "CAST", "SQUEEZE", "STRIDEDSLICE", "ARGMAX"} <= cpu_only
    mace_name = {"MatMul": "MATMUL", "Transpose": "TRANSPOSE", "Cast": "CAST", "Squeeze": "SQUEEZE",
                 "Slice": "STRIDEDSLICE", "ArgMax": "ARGMAX", "Shape": "SHAPE", "Where": "WHERE"}
    #: op_lists.rst says CPU, but the kernel cannot run an ONNX model's op (see the matrix note).
    kernel_says_no = {"Where": "where.cc:38"}
    for op, name in mace_name.items():
        assert name in cpu_only
        assert _status(m, "mace", "gpu", op) != "supported", op
        if op in kernel_says_no:
            assert _status(m, "mace", "cpu", op) == "unsupported", op
            assert kernel_says_no[op] in m.op_rule("mace", "cpu", op).note
        else:
            assert _status(m, "mace", "cpu", op) == "supported", op


@needs_reference
def test_mace_dsp_and_apu_follow_their_converters(m):
    dsp = _mace_device_list("Hexagon DSP / HTA")
    apu = _mace_device_list("MTK APU")
    assert {"Conv2D", "Eltwise", "Softmax", "StridedSlice"} <= dsp and "MatMul" not in dsp
    assert {"Conv2D", "PRelu", "Reshape"} <= apu and "BatchNorm" not in apu
    for hw, allowed in (("dsp", dsp), ("apu", apu)):
        for op in m.ops("mace"):
            types = [t for t in _mace_types(m.target_op("mace", op)) if t != "Identity"]
            if _status(m, "mace", hw, op) == "supported" and types:
                assert any(t in allowed for t in types), f"{op} ({types}) supported on {hw}"


# ------------------------------------------------------------------ TFLite


def _tflite_builtins() -> set:
    with open(REF / "tflite/builtin_operators.csv") as f:
        return {row["name"] for row in csv.DictReader(f)}


def _tflite_targets(target: str | None) -> list[str]:
    if not target or target.startswith("("):
        return []
    return [t for t in re.split(r"[ /+]+", re.sub(r"\(.*?\)", "", target)) if t]


def _gpu_parsed_ops() -> tuple[set, set]:
    text = (REF / "tflite/gpu_delegate_ops_constraints.md").read_text()
    table = text.split("## Per-op table")[1].split("## Not supported")[0]
    ops = set()
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| TFLite op") :
            ops.update(re.findall(r"\b[A-Z][A-Z0-9_]+\b", line.split("|")[1]))
    not_supported = text.split("## Not supported by the GPU delegate")[1].split("Note:")[0]
    return ops, set(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", not_supported))


def _nnapi_ops() -> tuple[set, set]:
    text = (REF / "tflite/nnapi_delegate_validate_summary.md").read_text()
    ops = set()
    for line in text.split("| TFLite op |")[1].split("Not in Validate")[0].splitlines():
        if line.startswith("| "):
            names = re.findall(r"\b[A-Z][A-Z0-9_]+\b", line.split("|")[1])
            ops.update(names)
            if names and "_" in names[0]:  # "LOGICAL_AND / OR / NOT" names LOGICAL_OR and LOGICAL_NOT
                prefix = names[0].rsplit("_", 1)[0]
                ops.update(f"{prefix}_{n}" for n in names[1:] if "_" not in n)
    not_in = set(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", text.split("Not in Validate")[1]))
    return ops, not_in


def _edgetpu_ops() -> set:
    text = (REF / "tflite/edgetpu_supported_ops.md").read_text()
    names = set()
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| Operation") and not line.startswith("| ---"):
            camel = line.split("|")[1].strip()
            snake = re.sub(r"(?<=[a-z])(?=[A-Z0-9])|(?<=[0-9])(?=[A-Z])", "_", camel).upper()
            names.add(snake.replace("RELU_6", "RELU6"))
    return names


@needs_reference
def test_tflite_targets_are_builtins(m):
    builtins = _tflite_builtins()
    assert len(builtins) > 150
    for op in m.ops("tflite"):
        for name in _tflite_targets(m.target_op("tflite", op)):
            assert name in builtins, f"{op}: {name} is not a TFLite builtin"


@needs_reference
def test_tflite_gpu_and_nnapi_agree_with_delegates(m):
    gpu_ops, gpu_not = _gpu_parsed_ops()
    nnapi_ops, nnapi_not = _nnapi_ops()
    assert {"CONV_2D", "SOFTMAX", "GATHER"} <= gpu_ops and "SQUEEZE" in gpu_not
    assert {"CONV_2D", "DIV", "SQUEEZE"} <= nnapi_ops and "GELU" in nnapi_not
    checked = 0
    for op in m.ops("tflite"):
        names = _tflite_targets(m.target_op("tflite", op))
        if not names or names[0] in ("MUL", "MEAN") and op in ("BatchNormalization", "InstanceNormalization",
                                                                "LayerNormalization", "HardSigmoid", "ReduceL2"):
            continue
        if _status(m, "tflite", "gpu", op) == "supported":
            assert any(n in gpu_ops and n not in gpu_not for n in names), f"{op} {names} on gpu"
        if any(n in gpu_not for n in names) and not any(n in gpu_ops for n in names):
            assert _status(m, "tflite", "gpu", op) == "unsupported", op
        if _status(m, "tflite", "nnapi", op) == "supported":
            assert any(n in nnapi_ops for n in names), f"{op} {names} on nnapi"
        if all(n in nnapi_not for n in names):
            assert _status(m, "tflite", "nnapi", op) == "unsupported", op
        checked += 1
    assert checked >= 60


@needs_reference
def test_tflite_edgetpu_agrees_with_coral_table(m):
    table = _edgetpu_ops()
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "LOGISTIC", "STRIDED_SLICE", "RESIZE_NEAREST_NEIGHBOR"} <= table
    # runtime v13's additions (google-coral/edgetpu@3b625cd:CHANGES.md#L24); TRANSPOSE_CONV among them is
    # not claimed yet (the zoo's retrain remedy for the Edge TPU rests on it: docs/incoming/quantB.md)
    table |= {"EXPAND_DIMS", "PACK", "QUANTIZE", "SUM"}
    for op in m.ops("tflite"):
        if op == "Transpose":  # supported only where the file has no TRANSPOSE (pattern interface_layout)
            continue
        target = m.target_op("tflite", op)
        names = _tflite_targets(target)
        if not names:
            continue
        alternatives = [_tflite_targets(alt) for alt in target.split(" / ")]
        mappable = any(all(n in table or n == "RELU_N1_TO_1" for n in alt) for alt in alternatives)
        if op in ("Squeeze", "Unsqueeze", "Flatten", "BatchNormalization", "GlobalAveragePool"):
            mappable = all(n in table for n in names)
        assert (_status(m, "tflite", "edgetpu", op) == "supported") == mappable, f"{op} -> {target}"


# ------------------------------------------------------------------ Core ML


@needs_reference
def test_coreml_targets_are_mil_ops_and_ane_is_never_claimed(m):
    mil = {line.split("\t")[0] for line in (REF / "coreml/mil_ops.tsv").read_text().splitlines()
           if line and not line.startswith("#")}
    assert {"conv", "layer_norm", "gather"} <= mil
    for op in m.ops("coreml"):
        target = m.target_op("coreml", op)
        if target and not target.startswith("("):
            for name in re.split(r"[ /+]+", target):
                assert name in mil, f"{op}: {name} is not a MIL op"
        # Apple publishes no per-op Neural Engine list: never claim 'supported' there.
        assert _status(m, "coreml", "ane", op) != "supported" or op == "Dropout", op
        assert _status(m, "coreml", "cpu", op) == "supported", op


def test_check_node_is_fast(m, zoo_model):
    from converter.ir.graph import to_graph
    import time

    graph = to_graph(zoo_model("transformer"))
    pairs = m.resolve_targets("all", "all")
    start = time.perf_counter()
    for _ in range(20):
        for fw, hw in pairs:
            for node in graph.nodes:
                m.check_node(node, fw, hw)
    per_call = (time.perf_counter() - start) / (20 * len(pairs) * len(graph.nodes))
    assert per_call < 100e-6, f"{per_call * 1e6:.1f} us per check_node"


# ------------------------------------------------------------------ constraint kinds added for the kernel reviews


def _kind_model(op, in_shape, attrs=None, inits=(), out_shape=None):
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    tensors = [numpy_helper.from_array(np.asarray(v), f"c{i}") for i, v in enumerate(inits)]
    node = helper.make_node(op, ["x"] + [t.name for t in tensors], ["y"], name="n0", **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape or in_shape)], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _overlay_check(tmp_path, op_yaml: str, model, hw="cpu"):
    """Verdict of node 0 of ``model`` on tflite/``hw`` with ``op_yaml`` as that op's entry."""
    from converter.ir.graph import to_graph

    overlay = _write(tmp_path, "frameworks:\n  tflite:\n    ops:\n" + op_yaml, "kinds.yaml")
    return load_matrix(overlays=[overlay]).check_node(to_graph(model).nodes[0], "tflite", hw)


def test_odd_match_and_trailing_ones(tmp_path):
    lrn = """      LRN:
        supported: [cpu]
        constraints: [{attr: size, odd: true}]
"""
    assert _overlay_check(tmp_path, lrn, _kind_model("LRN", [1, 6, 3, 3], {"size": 3})).status == "supported"
    v = _overlay_check(tmp_path, lrn, _kind_model("LRN", [1, 6, 3, 3], {"size": 4}))
    assert (v.status, v.reason) == ("unsupported", "LRN size=4: cpu supports size odd")

    lp = """      LpNormalization:
        supported: [cpu]
        constraints: [{axes: "attr:axis", default: -1, rank_of: 0, trailing_ones: true}]
"""
    assert _overlay_check(tmp_path, lp, _kind_model("LpNormalization", [2, 3, 1, 1], {"axis": 1})).supported
    assert _overlay_check(tmp_path, lp, _kind_model("LpNormalization", [2, 3, 5], {})).supported  # axis -1
    v = _overlay_check(tmp_path, lp, _kind_model("LpNormalization", [2, 3, 5], {"axis": 1}))
    assert v.reason == "LpNormalization axis=1 on rank-3 input of shape [2, 3, 5]: cpu supports every dim after the axis == 1"

    einsum = """      Einsum:
        supported: [cpu]
        constraints: [{attr: equation, match: "^[a-z,. ]*(->[a-z. ]*)?$"}]
"""
    assert _overlay_check(tmp_path, einsum, _kind_model("Einsum", [2, 3], {"equation": "ij->ji"}, out_shape=[3, 2])).supported
    v = _overlay_check(tmp_path, einsum, _kind_model("Einsum", [2, 3], {"equation": "iJ->Ji"}, out_shape=[3, 2]))
    assert v.status == "unsupported" and v.reason.startswith("Einsum equation=iJ->Ji: cpu supports equation matching")


def test_when_applies_a_constraint_to_matching_nodes_only(tmp_path):
    import numpy as np

    resize = """      Resize:
        supported: [cpu]
        constraints:
          - {attr: coordinate_transformation_mode, in: [asymmetric], default: half_pixel,
             when: {attr: mode, in: [nearest], default: nearest}}
"""
    scales = [np.zeros(0, np.float32), np.array([1, 1, 2, 2], np.float32)]

    def model(**attrs):
        return _kind_model("Resize", [1, 2, 3, 3], attrs, scales, [1, 2, 6, 6])

    v = _overlay_check(tmp_path, resize, model())  # nearest by default, half_pixel by default
    assert v.reason == ("Resize coordinate_transformation_mode=half_pixel: cpu supports coordinate_transformation_mode "
                        "in ['asymmetric'] when mode in ['nearest']")
    assert _overlay_check(tmp_path, resize, model(coordinate_transformation_mode="asymmetric")).supported
    assert _overlay_check(tmp_path, resize, model(mode="linear")).supported  # the condition does not hold


@pytest.mark.parametrize("constraint,message", [
    ("{pattern: gelu_tanh}", "unknown pattern 'gelu_tanh'; known: broadcast_operand_not_first_over_rows, gelu_erf"),
    ("{attr: size, odd: false}", "'odd' must be true"),
    ("{attr: equation, match: '[a-'}", "'match' is not a valid regular expression"),
    ("{attr: mode, in: [a], when: {attr: x, eq: 1, hw: [cpu]}}", "'when' must be a constraint mapping"),
    ("{attr: mode, in: [a], when: {python: 'x'}}", "needs exactly one of attr, rank"),
])
def test_new_kinds_are_validated_with_lines(tmp_path, constraint, message):
    overlay = _write(tmp_path, f"frameworks:\n  tflite:\n    ops:\n      Erf:\n        constraints:\n"
                               f"          - {constraint}\n", "k.yaml")
    with pytest.raises(BadInput) as err:
        load_matrix(overlays=[overlay])
    assert str(err.value).startswith("k.yaml:6: frameworks.tflite.ops.Erf.constraints.0: "), str(err.value)
    assert message in str(err.value)


# ------------------------------------------------------------------ the gelu_erf pattern vs the TFLite fusion


def _gelu_variant(name):
    """An Erf-GELU graph in one of the forms torch / hand-written exporters produce, or a near miss."""
    import math

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def c(v, n):
        return numpy_helper.from_array(np.array(v, np.float32), n)

    div, one, half = (c(math.sqrt(2.0), "k_div"), c(1.0, "k_one"), c(0.5, "k_half"))
    pre = helper.make_node("Div", ["x", "k_div"], ["u"], name="pre")
    tail = [helper.make_node("Mul", ["x", "a"], ["m"], name="mul1"), helper.make_node("Mul", ["m", "k_half"], ["y"], name="mul2")]
    add = helper.make_node("Add", ["e", "k_one"], ["a"], name="add")
    outputs = ["y"]
    if name == "mul_by_inverse_and_half_first":
        div = c(1.0 / math.sqrt(2.0), "k_div")
        pre = helper.make_node("Mul", ["x", "k_div"], ["u"], name="pre")
        add = helper.make_node("Add", ["k_one", "e"], ["a"], name="add")
        tail = [helper.make_node("Mul", ["x", "k_half"], ["h"], name="half"), helper.make_node("Mul", ["h", "a"], ["y"], name="mul1")]
    elif name == "swapped_operands":
        tail = [helper.make_node("Mul", ["a", "x"], ["m"], name="mul1"), helper.make_node("Mul", ["k_half", "m"], ["y"], name="mul2")]
    elif name == "wrong_scale":
        div = c(2.0, "k_div")
    elif name == "wrong_offset":
        one = c(2.0, "k_one")
    elif name == "wrong_half":
        half = c(0.25, "k_half")
    elif name == "erf_read_twice":
        tail.append(helper.make_node("Neg", ["e"], ["z"], name="neg"))
        outputs.append("z")
    elif name == "other_input_scaled":
        tail[0] = helper.make_node("Mul", ["w", "a"], ["m"], name="mul1")
    nodes = [pre, helper.make_node("Erf", ["u"], ["e"], name="erf"), add, *tail]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("x", "w")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 8]) for o in outputs],
                              [div, one, half])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


GELU_VARIANTS = {"plain": True, "mul_by_inverse_and_half_first": True, "swapped_operands": True, "wrong_scale": False,
                 "wrong_offset": False, "wrong_half": False, "erf_read_twice": False, "other_input_scaled": False}


@pytest.mark.parametrize("name", sorted(GELU_VARIANTS))
def test_gelu_erf_pattern_agrees_with_the_tflite_fusion(m, name):
    """The matrix keeps an Erf on TFLite exactly when the exporter's fuse_gelu makes it a GELU."""
    from converter.ir.graph import to_graph
    from converter.matrix.patterns import PATTERNS
    from converter.targets.tflite.fuse import fuse_gelu

    model = _gelu_variant(name)
    erf = next(n for n in to_graph(model).nodes if n.op == "Erf")
    verdict = m.check_node(erf, "tflite", "cpu")
    fused = fuse_gelu(to_graph(model))
    assert verdict.supported == GELU_VARIANTS[name] == (fused == 1), (name, verdict.reason, fused)
    found = PATTERNS["gelu_erf"].find(erf)  # the one definition both sides use
    assert (found is not None) == GELU_VARIANTS[name]
    if found is not None:
        assert [n.op for n in found.nodes][1:3] == ["Erf", "Add"] and len(found.nodes) == 5
        assert found.input.name == "x" and found.output.outputs == []  # y: what the fused Gelu computes
    if not verdict.supported:
        assert verdict.reason == ("Erf outside the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2))): cpu supports only inside "
                                  "the Erf-GELU pattern x*0.5*(1+Erf(x/sqrt(2))) (no TFLite builtin for Erf; only the "
                                  "Erf-GELU pattern maps to GELU)")
    # GELU has a GPU parser but is never delegated to NNAPI or compiled for the Edge TPU.
    assert m.check_node(erf, "tflite", "gpu").supported == GELU_VARIANTS[name]
    assert m.op_status("tflite", "nnapi", "Erf") == m.op_status("tflite", "edgetpu", "Erf") == "unsupported"


def test_kernel_review_constraints_cite_upstream_lines(m):
    """The TNN / MACE constraints found by reading the kernels cite the kernel (or converter) line."""
    cited = 0
    for fw in ("tnn", "mace"):
        for op, entry in m.data["frameworks"][fw]["ops"].items():
            for spec in entry.get("constraints") or ():
                citation = m.citation(spec.get("source"))
                code = citation is not None and citation.path.endswith((".cc", ".py", ".h"))
                if re.search(r"\w\.(cc|py):\d+", spec.get("why", "")):  # a kernel line named in words
                    assert code, (fw, op, spec)
                cited += code
    assert cited >= 20


# ------------------------------------------------------------------ kinds added to follow the TFLite / Core ML exporters


def _lstm_model(read_yc: bool, h0=None, lens=None):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = {"W": np.zeros((1, 8, 3), np.float32), "R": np.zeros((1, 8, 2), np.float32)}
    names = ["x", "W", "R", "", "lens" if lens is not None else "", "h0" if h0 is not None else ""]
    if lens is not None:
        inits["lens"] = np.asarray(lens, np.int32)
    if h0 is not None:
        inits["h0"] = np.asarray(h0, np.float32)
    while names[-1] == "":
        names.pop()
    nodes = [helper.make_node("LSTM", names, ["y", "yh", "yc"], name="n0", hidden_size=2)]
    if read_yc:
        nodes.append(helper.make_node("Neg", ["yc"], ["z"], name="neg"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ["y", "z"][:1 + read_yc]],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_unused_outputs_value_dims_and_nested_values(tmp_path):
    import numpy as np

    lstm = """      LSTM:
        supported: [cpu]
        constraints:
          - {unused_outputs: [2]}
          - {value: 5, each_eq: 0}
          - {value: 4, each_eq_dim: [0, 0]}
          - {attr: clip, eq: null}
"""
    assert _overlay_check(tmp_path, lstm, _lstm_model(False)).supported
    v = _overlay_check(tmp_path, lstm, _lstm_model(True))
    assert v.reason == "LSTM output(s) [2] read by another node: cpu supports output(s) [2] absent or unread"
    # each_* look at every element of a nested constant ([1, 1, 2] here), not at its rows.
    assert _overlay_check(tmp_path, lstm, _lstm_model(False, h0=np.zeros((1, 1, 2)))).supported
    v = _overlay_check(tmp_path, lstm, _lstm_model(False, h0=[[[0.0, 0.5]]]))
    assert v.reason == "LSTM input 5=[[[0.0, 0.5]]]: cpu supports every value of input 5 == 0"
    assert _overlay_check(tmp_path, lstm, _lstm_model(False, lens=[5])).supported
    v = _overlay_check(tmp_path, lstm, _lstm_model(False, lens=[4]))
    assert v.reason == ("LSTM input 4=[4] with dim 0 of input 0 = 5: cpu supports every value of input 4 == "
                        "dim 0 of input 0")

    roi = """      RoiAlign:
        supported: [cpu]
        constraints: [{dims: 0, axis: 0, eq: 1}, {dims: 0, axis: -1, max: 9}]
"""
    assert _overlay_check(tmp_path, roi, _kind_model("RoiAlign", [1, 3, 8, 9], {}, out_shape=[1, 3, 1, 1])).supported
    v = _overlay_check(tmp_path, roi, _kind_model("RoiAlign", [2, 3, 8, 10], {}, out_shape=[1, 3, 1, 1]))
    assert v.reason == ("RoiAlign input 0 of shape [2, 3, 8, 10]: cpu supports dim 0 == 1 (input 0); RoiAlign input 0 "
                        "of shape [2, 3, 8, 10]: cpu supports dim -1 <= 9 (input 0)")


def test_scales_exact_and_integer(tmp_path):
    import numpy as np

    resize = """      Resize:
        supported: [cpu]
        constraints:
          - {scales: 2, exact: true}
          - {scales: 2, integer: true, when: {attr: mode, in: [nearest], default: nearest}}
"""
    roi = np.zeros(0, np.float32)

    def model(scales, out_hw, sizes=None, **attrs):
        inits = [roi, np.array(scales, np.float32)] + ([np.array(sizes, np.int64)] if sizes else [])
        return _kind_model("Resize", [1, 2, 4, 4], attrs, inits, [1, 2, *out_hw])

    assert _overlay_check(tmp_path, resize, model([1, 1, 2, 3], [8, 12])).supported
    assert _overlay_check(tmp_path, resize, model([1, 1, 1.5, 1.5], [6, 6], mode="linear")).supported
    # Sizes instead of scales: the ratio is the sizes' own, so only the integer test can fail.
    assert _overlay_check(tmp_path, resize, model([], [5, 5], [1, 2, 5, 5], mode="linear")).supported
    v = _overlay_check(tmp_path, resize, model([], [5, 5], [1, 2, 5, 5]))
    assert v.reason == ("Resize resizes [1, 2, 4, 4] to [1, 2, 5, 5]: cpu supports output size a whole multiple of "
                        "the input size when mode in ['nearest']")
    v = _overlay_check(tmp_path, resize, model([1, 1, 1.3, 1.3], [5, 5], mode="linear"))
    assert v.reason == ("Resize scales [1.0, 1.0, 1.2999999523162842, 1.2999999523162842] resize [1, 2, 4, 4] to "
                        "[1, 2, 5, 5]: cpu supports scales (input 2) x input size == output size")


@pytest.mark.parametrize("constraint,message", [
    ("{unused_outputs: 2}", "'unused_outputs' must be a list of output indices"),
    ("{scales: 2}", "'scales' needs 'exact: true' and/or 'integer: true'"),
    ("{scales: 2, exact: false}", "'scales' needs 'exact: true' and/or 'integer: true'"),
    ("{dims: 0, axis: x, eq: 1}", "'axis' must be a dimension index"),
    ("{value: 4, each_eq_dim: [0]}", "'each_eq_dim' must be [input index, axis]"),
    ("{scales: 2, exact: true, in: [1]}", "unknown key(s) ['in'] for a 'scales' constraint"),
])
def test_exporter_kinds_are_validated_with_lines(tmp_path, constraint, message):
    overlay = _write(tmp_path, f"frameworks:\n  tflite:\n    ops:\n      Resize:\n        constraints:\n"
                               f"          - {constraint}\n", "k.yaml")
    with pytest.raises(BadInput) as err:
        load_matrix(overlays=[overlay])
    assert str(err.value).startswith("k.yaml:6: frameworks.tflite.ops.Resize.constraints.0: "), str(err.value)
    assert message in str(err.value)


# ------------------------------------------------------------------ TFLite / Core ML entries vs their exporters' cases

#: The TFLite exporter lowers a lone Erf too (lower_erf), but the matrix keeps Erf to the GELU
#: pattern so that the planner's erf_polynomial (reported as an approximation) handles it.
TFLITE_EXPORTER_ONLY = {"Erf"}


def test_every_tflite_exporter_case_is_supported_on_the_cpu(m):
    """Each single-op model the TFLite exporter runs exactly in LiteRT (tests/test_tflite_matrix_coverage.py)
    is 'supported' on tflite/cpu, so the matrix is never stricter than the exporter."""
    from converter.ir.graph import to_graph
    from test_tflite_matrix_coverage import CASES

    checked = 0
    for case in CASES:
        if case.op not in m.ops("tflite") or case.op in TFLITE_EXPORTER_ONLY:
            continue
        for node in to_graph(case.model).nodes:
            if node.op == case.op:
                v = m.check_node(node, "tflite", "cpu")
                assert v.status == "supported", (case.id, v.reason)
                checked += 1
    assert checked >= 120


def test_every_coreml_exporter_case_is_supported_and_every_refusal_unsupported(m):
    """The Core ML exporter's cases (tests/test_coreml_matrix_coverage.py) are 'supported' on coreml/cpu;
    the variants it refuses are 'unsupported' there."""
    pytest.importorskip("coremltools")
    from converter.ir.graph import to_graph
    from test_coreml_matrix_coverage import CASES, REFUSED, _model

    def node_of(case):
        return next(n for n in to_graph(_model(case)[0]).nodes if n.op == case.op)

    supported = [c for c in CASES if c.op in m.ops("coreml")]
    assert len(supported) >= 100
    for case in supported:
        v = m.check_node(node_of(case), "coreml", "cpu")
        assert v.status == "supported", (case.op, case.label, v.reason)
    for case, message in REFUSED:
        assert m.check_node(node_of(case), "coreml", "cpu").status == "unsupported", (case.op, message)


def test_exporter_constraints_cite_upstream_lines(m):
    """Constraints of the entries brought in line with the TFLite / Core ML exporters name the upstream
    file:line, or say that the limit is the exporter's own."""
    changed = {"tflite": ["Conv", "ConvTranspose", "LpNormalization", "LRN", "MaxPool", "AveragePool", "GatherND",
                          "ScatterND", "Pad", "Resize", "Upsample", "LSTM"],
               "coreml": ["Einsum", "LRN", "Resize", "Upsample", "LSTM", "GRU", "RoiAlign", "GridSample"]}
    vendor_files = ("tflite/delegates/gpu/common/model_builder.cc", "tflite/tools/versioning/gpu_compatibility.cc",
                    "tflite/delegates/nnapi/nnapi_delegate.cc",
                    "Edge_TPU/convert_model_for_Edge_TPU.md")  # the delegates' own checks and tables
    cited = 0
    for fw, ops in changed.items():
        for op in ops:
            for spec in m.data["frameworks"][fw]["ops"][op].get("constraints") or ():
                why = spec.get("why", "")
                citation = m.citation(spec.get("source"))
                if citation is None or citation.path in vendor_files or spec.get("severity") == "unverified":
                    continue
                assert citation.path.endswith((".cc", ".h", ".py", ".fbs")) or "exporter" in why, (fw, op, spec)
                cited += 1
    assert cited >= 40


def test_edgetpu_resize_is_supported_but_may_stay_on_cpu(m):
    spec = m.may_stay_on_cpu("tflite", "Resize", "edgetpu")
    assert spec["source"] == "dgist-datalab/Datalab_Intern@fc0ee50:Edge_TPU/convert_model_for_Edge_TPU.md#L35-L36"
    assert "may not be mapped to the Edge TPU" in spec["why"]
    assert m.may_stay_on_cpu("tflite", "Resize", "gpu") is None and m.may_stay_on_cpu("tflite", "Conv", "edgetpu") is None
