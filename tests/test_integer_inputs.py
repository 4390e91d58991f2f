"""Integer model inputs stay integer in every exported file and run in the real runtimes
(issue 27, item 3): LiteRT (int64 GATHER indices), TNN's ``tnn_run`` and MACE's ``mace_run``
(int32 inputs; int64 is carried as int32), CoreML's MIL executor (int32 placeholders).

Two models: an embedding lookup masked by an int64 attention mask, built in ONNX (its outputs
are rows of the table times 0 or 1, so every runtime must match onnxruntime *exactly*), and a
DistilBERT-shaped encoder in plain torch (tests/encoder_models.py: int64 ids and mask, additive
mask, post-norm attention blocks, GELU MLP), saved as TorchScript and ported with
``-s input_ids=1x16:int64``, verified within float32 tolerance by each real runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.port import PortRequest, PortSession, port
from rank_runtimes import MACE_RUN, TNN_RUN, need

VOCAB, LENGTH, DIM = 50, 8, 6
TARGETS = [("tflite", "cpu"), ("tnn", "x86"), ("mace", "cpu"), ("coreml", "cpu")]


def lookup_model(ids_type=TensorProto.INT64) -> onnx.ModelProto:
    """``Gather(table, input_ids) * Unsqueeze(Cast(attention_mask, float), 2)`` -> [1, L, D]."""
    table = np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["rows"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
        helper.make_node("Mul", ["rows", "mask3"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes, "lookup",
        [helper.make_tensor_value_info("input_ids", ids_type, [1, LENGTH]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, LENGTH])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, LENGTH, DIM])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array([2], np.int64), "axes")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def runtimes_for(to: str) -> dict:
    if to == "tnn":
        need(TNN_RUN)
        return {"tnn": str(TNN_RUN)}
    if to == "mace":
        need(MACE_RUN)
        return {"mace": str(MACE_RUN)}
    if to == "coreml":
        pytest.importorskip("coremltools")
    return {}


def target_stage(result):
    return next(s for s in result.verification.stages if s.name.startswith("target:"))


#: What each file declares for the int64 ids: TFLite keeps int64, the others take int32.
FILE_INPUT_TYPE = {"tflite": "int64", "tnn": "int32", "mace": "int32", "coreml": "int32"}


def file_input_type(result, name: str) -> str:
    """The type the exported file itself declares for input ``name`` (read from the file)."""
    files = [str(f) for f in result.out_dir.iterdir()]
    if result.target == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        details = Interpreter(next(f for f in files if f.endswith(".tflite"))).get_input_details()
        return np.dtype(next(d["dtype"] for d in details if d["name"] == name)).name
    if result.target == "tnn":  # "name rank d0 d1 ... dtype" in the proto's input line (TNN DataType 3: int32)
        text = open(next(f for f in files if f.endswith(".tnnproto"))).read().splitlines()[1]
        fields = text.strip('"').rstrip(" ,").split(" : ")
        words = next(f.split() for f in fields if f.split()[0] == name)
        return {"0": "float32", "3": "int32"}[words[-1]]
    if result.target == "mace":
        return next(i["dtype"] for i in result.report["artifact"]["meta"]["inputs"] if i["name"] == name)
    import coremltools as ct

    spec = ct.utils.load_spec(next(f for f in files if f.endswith(".mlpackage")))
    kind = next(i for i in spec.description.input if i.name == name).type.multiArrayType.dataType
    return {ct.proto.FeatureTypes_pb2.ArrayFeatureType.INT32: "int32"}.get(kind, str(kind))


@pytest.mark.parametrize("to, hw", TARGETS)
def test_embedding_lookup_is_exact_in_the_real_runtime(tmp_path, to, hw):
    """Token ids over the whole vocabulary (--input-range) and a mask of ones: every runtime
    returns the table's rows bit for bit; then a mask with zeros, run directly, likewise."""
    model = lookup_model()
    result = port(model, to=to, hw=hw, out=tmp_path / "out", input_ranges={"input_ids": (0, VOCAB)},
                  runtimes=runtimes_for(to))
    assert result.status == "ok", result.reason
    stage = target_stage(result)
    assert stage.status == "pass" and stage.oracle["kind"] == "runtime" or to == "coreml", stage.oracle
    assert stage.outputs[0].metrics.max_abs == 0.0
    ids = result.verification.inputs[0]["input_ids"]
    assert ids.dtype == np.int64 and ids.max() >= 25 and ids.min() >= 0  # drawn from [0, 50), not [0, 4)
    assert (result.verification.inputs[0]["attention_mask"] == 1).all()  # a mask is all ones
    assert file_input_type(result, "input_ids") == FILE_INPUT_TYPE[to]
    feeds = {"input_ids": np.array([[0, 49, 7, 7, 13, 1, 48, 25]], np.int64),
             "attention_mask": np.array([[1, 1, 1, 0, 1, 0, 1, 1]], np.int64)}
    want = _onnxruntime(model, feeds)["output"]
    got = _run_file(result, feeds)["output"]
    assert got.dtype == np.float32 and np.array_equal(got, want)


def test_int32_ids_keep_their_type(tmp_path):
    """An int32 input is int32 in the TFLite file and exact in LiteRT."""
    model = lookup_model(TensorProto.INT32)
    result = port(model, to="tflite", out=tmp_path / "out", input_ranges={"input_ids": (0, VOCAB)})
    assert result.status == "ok" and target_stage(result).outputs[0].metrics.max_abs == 0.0
    assert file_input_type(result, "input_ids") == "int32"


@pytest.fixture(scope="module")
def encoder_pt(tmp_path_factory):
    """The DistilBERT-shaped encoder as TorchScript."""
    pytest.importorskip("torch")
    from encoder_models import save_encoder

    path = tmp_path_factory.mktemp("encoder") / "encoder.pt"
    save_encoder(path, length=16)
    return path


@pytest.fixture(scope="module")
def encoder_session(encoder_pt):
    """The encoder loaded once with int64 ids and mask."""
    path = encoder_pt
    request = PortRequest.from_flags(str(path), input_shapes=["input_ids=1x16:int64", "attention_mask=1x16:int64"],
                                     input_ranges=["input_ids=0:1000"],
                                     runtimes={k: str(v) for k, v in (("tnn", TNN_RUN), ("mace", MACE_RUN))
                                               if v.exists()})
    with PortSession.open(request) as session:
        session.load()
        yield session


def test_undeclared_token_ids_say_how_to_declare_them(encoder_pt):
    """Without a type, TorchScript is traced with float32 and torch refuses the embedding
    lookup: the one line says which flag fixes it (issue 27's DistilBERT report)."""
    from converter.errors import BadInput
    from converter.frontend.source import ModelSource

    with pytest.raises(BadInput) as info:
        ModelSource.from_flags(str(encoder_pt), ["input_ids=1x16", "attention_mask=1x16"]).load()
    text = str(info.value)
    assert "\n" not in text and "'indices'" in text
    assert text.endswith("inputs without a declared type are traced as float32: declare integer ones (token ids, "
                         "masks) as -s input_ids=SHAPE:int64")


def test_torchscript_is_traced_with_the_declared_types(encoder_session):
    original, normalized = encoder_session.load()
    types = {i.name: i.type.tensor_type.elem_type for i in normalized.graph.input}
    assert types == {"input_ids": TensorProto.INT64, "attention_mask": TensorProto.INT64}
    gathers = [n for n in normalized.graph.node if n.op_type == "Gather" and "input_ids" in n.input]
    assert len(gathers) == 1  # the token embedding reads the ids directly


@pytest.mark.parametrize("to, hw", TARGETS)
def test_encoder_with_int64_inputs_ports_and_verifies(encoder_session, tmp_path, to, hw):
    if to in ("tnn", "mace"):
        need(TNN_RUN if to == "tnn" else MACE_RUN)
    if to == "coreml":
        pytest.importorskip("coremltools")
    result = encoder_session.port_pair(to, hw, tmp_path / "out")
    assert result.status == "ok", result.reason
    stage = target_stage(result)
    assert stage.status == "pass"
    assert stage.oracle["name"].startswith({"tflite": "LiteRT", "tnn": "TNN x86 runtime (tnn_run)",
                                            "mace": "MACE CPU runtime (mace_run)",
                                            "coreml": "CoreML MIL executor"}[to]), stage.oracle
    assert stage.outputs[0].metrics.max_abs < 5e-5 and stage.outputs[0].metrics.cosine > 0.999999
    assert file_input_type(result, "input_ids") == FILE_INPUT_TYPE[to]
    ids = result.verification.inputs[0]["input_ids"]
    assert ids.max() >= 100  # the declared range [0, 1000), not the default [0, 4)


def _onnxruntime(model, feeds):
    from converter.runtimes.onnxruntime import onnx_runner

    return onnx_runner(model)(feeds)


def _run_file(result, feeds):
    """The exported file run on ``feeds`` by the runner that judged it (a real runtime where given),
    read back from the port's directory as ``edgeconv verify`` reads it."""
    from converter.targets.oracles import bind, resolve
    from converter.verify.pipeline import TARGET_FILES, target_artifact

    main = next(f for f in result.out_dir.iterdir() if f.name.endswith(TARGET_FILES))
    target, artifact = target_artifact(main)
    runtime = resolve(result.target, {k: v for k, v in (("tnn", str(TNN_RUN)), ("mace", str(MACE_RUN)))
                                      if k == result.target}, result.hw)
    return bind(target, runtime).run(artifact, feeds)


# -- HuggingFace's attention: SDPA with a boolean mask --------------------------------------------


@pytest.fixture(scope="module")
def sdpa_files(tmp_path_factory):
    """The encoder with SDPA attention as a .pt2 and as torch's default (dynamo, opset 20) .onnx."""
    pytest.importorskip("torch")
    from encoder_models import save_encoder

    base = tmp_path_factory.mktemp("sdpa")
    save_encoder(base / "sdpa.pt2", kind="pt2", sdpa=True)
    save_encoder(base / "sdpa.onnx", kind="onnx", sdpa=True)
    return base


@pytest.mark.parametrize("kind", ["pt2", "onnx"])
@pytest.mark.parametrize("to", ["tflite", "coreml"])
def test_sdpa_encoder_ports_to_tflite_and_coreml(sdpa_files, tmp_path, kind, to):
    """The exporters' ``Where(mask, 0, -inf)`` and ``Where(IsNaN(p), 0, p)`` (torch's SDPA with a
    boolean mask, in every HF encoder): IsNaN becomes Not(Equal(x, x)); CoreML gathers the bool
    mask through int32 and broadcasts select's scalar branches."""
    if to == "coreml":
        pytest.importorskip("coremltools")
    result = port(str(sdpa_files / f"sdpa.{kind}"), to=to, out=tmp_path / "out",
                  input_ranges={"input_ids": (0, 1000)})
    assert result.status == "ok", result.reason
    stage = target_stage(result)
    assert stage.status == "pass" and stage.outputs[0].metrics.max_abs < 5e-5
    applied = [a["rule"] for a in result.report["legalize"]["applied"]] if "legalize" in result.report else None
    legalized = onnx.load(str(result.out_dir / "legalized.onnx"))
    ops = [n.op_type for n in legalized.graph.node]
    assert "IsNaN" not in ops and ops.count("Equal") == ops.count("Not") == 2, (ops, applied)
    assert file_input_type(result, "input_ids") == FILE_INPUT_TYPE[to]


@pytest.mark.parametrize("to", ["tnn", "mace"])
def test_sdpa_encoder_on_tnn_and_mace_is_refused_naming_the_op(sdpa_files, tmp_path, to):
    """TNN's x86 and MACE's CPU kernels have no Where/bool tensors for the boolean mask: the port
    stops with the nodes and the constraint (TNN: custom-layer scaffolds, exit 7; MACE: exit 3),
    never an exception."""
    result = port(str(sdpa_files / "sdpa.onnx"), to=to, out=tmp_path / "out", input_ranges={"input_ids": (0, 1000)})
    assert result.status in ("needs_custom", "unsupported"), (result.status, result.reason)
    assert any(op in result.reason.lower() for op in ("where", "expand", "cast", "equal", "not")), result.reason
    assert "Error" not in result.reason and "Traceback" not in result.reason


def mask_logic_model() -> onnx.ModelProto:
    """An int64 mask through bool logic into an additive [1, 1, L, L] mask, as HF's mask builders
    write it: Cast to bool, Gather of bool data, And/Or/Xor, Where(cond, 0, -inf) with scalar
    branches and a bigger condition, Where(IsNaN(...))."""
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.BOOL),
        helper.make_node("Gather", ["m", "order"], ["g"], axis=1),               # bool data, constant indices
        helper.make_node("Xor", ["g", "flip"], ["x"]),
        helper.make_node("Or", ["x", "g"], ["o"]),
        helper.make_node("And", ["o", "causal"], ["c"]),                          # [1, L] & [L, L] -> [L, L]
        helper.make_node("Unsqueeze", ["c", "axes01"], ["c4"]),
        helper.make_node("Where", ["c4", "zero", "minus_inf"], ["bias"]),        # scalar branches, [1,1,L,L] cond
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
        helper.make_node("IsNaN", ["p"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "p"], ["output"]),
    ]
    length = LENGTH
    inits = {"order": np.arange(length)[::-1].copy(), "flip": np.array([False] * (length - 1) + [True]),
             "causal": np.tril(np.ones((length, length), bool)), "axes01": np.array([0, 1], np.int64),
             "zero": np.zeros((), np.float32), "minus_inf": np.array(-np.inf, np.float32)}
    graph = helper.make_graph(
        nodes, "mask_logic",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, length]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, length, length])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 2, length, length])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("to", ["tflite", "coreml"])
def test_mask_logic_matches_onnxruntime(tmp_path, to):
    """Fully masked rows included (NaN -> 0 through the IsNaN rewrite): the file's outputs match
    onnxruntime's to float32 rounding, the masked entries exactly."""
    if to == "coreml":
        pytest.importorskip("coremltools")
    model = mask_logic_model()
    result = port(model, to=to, out=tmp_path / "out")
    assert result.status == "ok", result.reason
    rng = np.random.default_rng(3)
    for mask in ([[1, 1, 1, 1, 0, 0, 1, 0]], [[0] * LENGTH], [[1] * LENGTH]):
        feeds = {"attention_mask": np.array(mask, np.int64),
                 "scores": rng.standard_normal((1, 2, LENGTH, LENGTH)).astype(np.float32)}
        want, got = _onnxruntime(model, feeds)["output"], _run_file(result, feeds)["output"]
        assert np.array_equal(want == 0, got == 0) and not np.isnan(got).any()
        if not any(mask[0]):  # every row but the last fully masked: NaN in the softmax, 0 after it
            assert (got[0, :, :-1] == 0).all() and (got[0, :, -1] != 0).any()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("to, hw", [("tnn", "x86"), ("mace", "cpu"), ("coreml", "cpu")])
def test_ids_the_runtime_cannot_hold_are_refused_naming_the_constraint(tmp_path, to, hw):
    """An int64 id beyond what the file's int32 input holds (beyond 2**24 for tnn_run, which reads
    inputs through float32) is one line naming the runtime and the limit, never a silent wrap."""
    from converter.runtimes import RuntimeRefused

    result = port(lookup_model(), to=to, hw=hw, out=tmp_path / "out", runtimes=runtimes_for(to))
    assert result.status == "ok", result.reason
    big = {"tnn": 2 ** 24, "mace": 2 ** 31, "coreml": 2 ** 31}[to]
    feeds = {"input_ids": np.array([[0, 1, 2, 3, 4, 5, 6, big]], np.int64),
             "attention_mask": np.ones((1, LENGTH), np.int64)}
    with pytest.raises(RuntimeRefused) as info:
        _run_file(result, feeds)
    limit = {"tnn": "2**24", "mace": "2**31", "coreml": "2**31"}[to]
    assert str(info.value).endswith(f"takes input 'input_ids' as {'float32' if to == 'tnn' else 'int32'} holding "
                                    f"magnitudes below {limit}; it holds {big}")
    feeds["input_ids"][0, -1] = 49  # the same feeds with a valid id run, exactly
    assert np.array_equal(_run_file(result, feeds)["output"], _onnxruntime(lookup_model(), feeds)["output"])


def test_a_module_with_int64_example_inputs_ports_and_checks_declared_types(tmp_path):
    """``port(module, (ids, mask))``: the example tensors carry the types; a declared type that
    differs from theirs is one line naming the module."""
    torch = pytest.importorskip("torch")
    from converter.errors import BadInput
    from encoder_models import tiny_encoder

    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(1, 16, dtype=torch.int64)
    result = port(tiny_encoder(), (ids, mask), to="tflite", out=tmp_path / "out",
                  input_ranges={"input_ids": (0, 1000)})
    assert result.status == "ok", result.reason
    assert file_input_type(result, "input_ids") == "int64" and target_stage(result).status == "pass"
    with pytest.raises(BadInput, match=r"input 'input_ids' of the Encoder module is int64; --input-shape declares "
                                       r"int32"):
        port(tiny_encoder(), (ids, mask), to="tflite", out=tmp_path / "out2", input_shapes=["input_ids=1x16:int32"])


def test_int8_encoder_calibrated_on_token_ids_in_the_natural_layout(encoder_pt, tmp_path):
    """Calibration data as a tokenizer hands it over, ids [32, 16] and mask [32, 16] for 1x16
    inputs: 32 samples; the int8 TFLite file keeps int64 ids and is judged by LiteRT."""
    ids = np.random.default_rng(0).integers(0, 1000, (32, 16)).astype(np.int64)
    np.savez(tmp_path / "calib.npz", input_ids=ids, attention_mask=np.ones((32, 16), np.int64))
    result = port(str(encoder_pt), to="tflite", out=tmp_path / "out", quantize="int8",
                  calibration=str(tmp_path / "calib.npz"),
                  input_shapes=["input_ids=1x16:int64", "attention_mask=1x16:int64"],
                  input_ranges={"input_ids": (0, 1000)})
    assert result.status == "ok", result.reason
    quant = result.report["quantization"]
    assert quant["calibration"]["samples"] == 32
    assert quant["file_verification"]["ok"] is True and quant["file_verification"]["runtime"].startswith("LiteRT")
    assert file_input_type(result, "input_ids") == "int64"
