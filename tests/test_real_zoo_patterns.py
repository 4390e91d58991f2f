"""Patterns that published architectures (benchmarks/real_zoo.py) broke, each on a small model
built here with seeded weights: Swin's shifted-window block traced to TorchScript (shape
computations that fold only over several rounds), a scalar Gather index read back from a TNN
file, MACE Eltwise constants that broadcast along a non-channel axis of a 4-D tensor (LayerNorm
over the last axis of channels-last tensors, as Swin and ConvNeXt have)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from converter.port import PortRequest, PortSession, port
from rank_runtimes import mace_run

torch = pytest.importorskip("torch")


def shifted_window_model():
    """A Swin-style block in channels-last layout: pad to whole windows, cyclic shift, rank-6
    window partition, attention with a shift mask built from traced shapes, reverse."""
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, dim=16, heads=2, window=4, shift=2):
            super().__init__()
            self.heads, self.window, self.shift = heads, window, shift
            self.norm = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):  # [B, H, W, C]
            b, h, w, c = x.shape
            ws, s = self.window, self.shift
            y = F.pad(self.norm(x), (0, 0, 0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
            _, ph, pw, _ = y.shape
            y = torch.roll(y, shifts=(-s, -s), dims=(1, 2))
            nw = (ph // ws) * (pw // ws)
            y = y.view(b, ph // ws, ws, pw // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b * nw, ws * ws, c)
            qkv = self.qkv(y).reshape(y.size(0), y.size(1), 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = q.matmul(k.transpose(-2, -1)) * (c // self.heads) ** -0.5
            mask = y.new_zeros((ph, pw))
            count = 0
            for hs in ((0, -ws), (-ws, -s), (-s, None)):
                for wsl in ((0, -ws), (-ws, -s), (-s, None)):
                    mask[hs[0]:hs[1], wsl[0]:wsl[1]] = count
                    count += 1
            mask = mask.view(ph // ws, ws, pw // ws, ws).permute(0, 2, 1, 3).reshape(nw, ws * ws)
            mask = mask.unsqueeze(1) - mask.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
            n = y.size(1)
            attn = attn.view(y.size(0) // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n).softmax(-1)
            out = self.proj(attn.matmul(v).transpose(1, 2).reshape(y.size(0), n, c))
            out = out.view(b, ph // ws, pw // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
            return x + torch.roll(out, shifts=(s, s), dims=(1, 2))[:, :h, :w, :].contiguous()

    class TinySwin(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, 16, 4, 4)
            self.block = Block()
            self.head = nn.Linear(16, 5)

        def forward(self, x):
            return self.head(self.block(self.embed(x).permute(0, 2, 3, 1)).mean((1, 2)))

    torch.manual_seed(0)
    model = TinySwin().eval()
    with torch.no_grad():  # a LayerNorm with gamma/beta that are not 1/0
        model.block.norm.weight.uniform_(0.5, 1.5)
        model.block.norm.bias.normal_(0, 0.1)
    return model


def _mace_cpu_output(model, name: str, x: np.ndarray, tmp_path) -> np.ndarray:
    """Output ``y`` of ``model`` exported for MACE's CPU and run in MACE's own mace_run (the test
    skips, naming the path, where ../shared/runtimes is absent)."""
    from converter import targets
    from converter.targets.base import ExportOptions

    art = targets.get("mace").export(model, tmp_path / "m", "cpu", ExportOptions(name=name))
    return mace_run(art, {"x": x}, tmp_path / "run")["y"]


def target_stage(result):
    return next(s for s in result.verification.stages if s.name.startswith("target:"))


SHAPE = (1, 3, 28, 28)  # 7x7 patches: padded to 8x8, four 4x4 windows, shifted by 2


@pytest.fixture(scope="module")
def swin_pt(tmp_path_factory):
    path = tmp_path_factory.mktemp("swin") / "tiny_swin.pt"
    model = shifted_window_model()
    torch.jit.trace(model, torch.zeros(SHAPE)).save(str(path))
    return path


@pytest.fixture(scope="module")
def swin_session(swin_pt):
    """The model loaded once, ported to every target below."""
    with PortSession.open(PortRequest.from_flags(str(swin_pt), input_shapes={"": SHAPE})) as session:
        session.load()
        yield session


@pytest.fixture(scope="module")
def swin_loaded(swin_session):
    """(original, normalized)."""
    return swin_session.load()


def test_shifted_window_shape_computations_fold_to_constants(swin_loaded):
    """With a fixed input shape every Shape/Gather/Concat/Mod/Range chain that sizes Pad, Reshape
    and the shift mask folds away: before the fixpoint, 48 Shape nodes and 147 tensors of unknown
    shape stayed (so TFLite's Pad and TNN refused the model, CoreML needed custom Mod layers)."""
    normalized = swin_loaded[1]
    ops = Counter(n.op_type for n in normalized.graph.node)
    for op in ("Shape", "ConstantOfShape", "Range", "ScatterND", "Where", "Mod", "Expand", "Cast"):
        assert ops[op] == 0, (op, ops)
    unknown = [v.name for v in normalized.graph.value_info
               if any(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)]
    assert unknown == []
    assert len(normalized.graph.node) == 46, ops


@pytest.mark.parametrize("to, hw", [("tflite", "cpu"), ("tnn", "x86"), ("mace", "cpu"), ("coreml", "cpu")])
def test_shifted_window_block_ports_and_verifies(swin_session, tmp_path, to, hw):
    if to == "coreml":
        pytest.importorskip("coremltools")
    result = swin_session.port_pair(to, hw, tmp_path / "out")
    assert result.status == "ok", result.reason
    assert not result.report.get("custom_layers")
    stage = target_stage(result)
    assert stage.status == "pass"
    assert max(o.metrics.max_abs for o in stage.outputs) < 1e-5


def _gather_scalar_model():
    """y = x[2] along axis 1 of a rank-4 tensor: a scalar index drops the axis."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5])
    idx = numpy_helper.from_array(np.array(2, np.int64), "idx")
    node = helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)
    graph = helper.make_graph([node], "g", [x], [y], [idx])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_tnn_scalar_gather_index_reads_back_as_a_scalar(tmp_path):
    """TNN stores a scalar index with no dims, and its Gather then drops the axis
    (gather_layer.cc); the reader used to make it [1], keeping the axis."""
    from converter import targets
    from converter.targets.base import ExportOptions
    from converter.targets.tnn.reader_onnx import load_as_onnx

    model = _gather_scalar_model()
    art = targets.get("tnn").export(model, tmp_path, "x86", ExportOptions(name="g"))
    back = load_as_onnx(art.files[0], art.files[1])
    out = back.graph.output[0]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 4, 5]
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
    got = ort.InferenceSession(back.SerializeToString()).run(None, {back.graph.input[0].name: x})[0]
    assert np.array_equal(got, x[:, 2])


def _last_axis_affine_model():
    """LayerNorm-style affine over the last axis of a 4-D tensor: x * gamma[W] + beta[1,1,H,W]."""
    rng = np.random.default_rng(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 6])
    gamma = numpy_helper.from_array(rng.uniform(0.5, 1.5, 6).astype(np.float32), "gamma")
    beta = numpy_helper.from_array(rng.standard_normal((1, 1, 5, 6)).astype(np.float32), "beta")
    nodes = [helper.make_node("Mul", ["x", "gamma"], ["t"]), helper.make_node("Add", ["t", "beta"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], [gamma, beta])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("hw", ["cpu", "gpu"])
def test_mace_eltwise_constant_broadcast_along_a_non_channel_axis(tmp_path, hw):
    """Refused before ("4-D constant operand ... is not per-channel"); now written in NHWC order
    (the CPU runtime transposes 4-D constants of AUTO ops at load and broadcasts size-1 dims), and
    expanded to the full shape on the GPU, whose kernel broadcasts only [N,1,1,C] / [N,H,W,1]."""
    path = tmp_path / "affine.onnx"
    onnx.save(_last_axis_affine_model(), path)
    result = port(str(path), to="mace", hw=hw, out=tmp_path / "out")
    assert result.status == "ok", result.reason
    stage = target_stage(result)
    assert stage.status == "pass"
    assert stage.outputs[0].metrics.max_abs < 1e-6


def test_mace_nhwc_constant_in_the_real_runtime(tmp_path):
    """The same model in MACE's own mace_run (test oracle; skipped when not present)."""

    model = onnx.shape_inference.infer_shapes(_last_axis_affine_model())
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 6)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = _mace_cpu_output(model, "affine", x, tmp_path)
    assert float(np.abs(got - ref).max()) < 1e-5


def test_torchscript_with_fused_attention_loads_through_the_second_route(tmp_path):
    """nn.MultiheadAttention traced in eval mode under no_grad records
    aten::_native_multi_head_attention (torchvision's ViT-B/16 does), which the TorchScript ONNX
    exporter cannot export; the loader converts the TorchScript graph to an ExportedProgram,
    decomposes the fused op and exports that.  Same interface names as the first route."""
    from torch import nn

    from converter.frontend.load import load_model

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(16)
            self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
            self.head = nn.Linear(16, 4)

        def forward(self, tokens):
            y = self.norm(tokens)
            a, _ = self.attention(y, y, y, need_weights=False)
            return self.head(tokens + a)

    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(1, 5, 16)
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        assert "_native_multi_head_attention" in str(traced.inlined_graph)
        ref = model(x).numpy()
    path = tmp_path / "encoder.pt"
    traced.save(str(path))
    onnx_model = load_model(path, {"": (1, 5, 16)})
    assert [i.name for i in onnx_model.graph.input] == ["tokens"]
    assert [o.name for o in onnx_model.graph.output] == ["output"]
    ops = Counter(n.op_type for n in onnx_model.graph.node)
    assert ops["Softmax"] == 1 and not any("Attention" in op for op in ops)
    got = ort.InferenceSession(onnx_model.SerializeToString()).run(None, {"tokens": x.numpy()})[0]
    assert float(np.abs(got - ref).max()) < 1e-5


def _global_pool_3d_model(op):
    """A video head: GlobalAveragePool/GlobalMaxPool over [N, C, D, H, W], then Flatten."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    nodes = [helper.make_node(op, ["x"], ["p"]), helper.make_node("Flatten", ["p"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_mace_global_pool_over_three_spatial_axes(tmp_path, op):
    """R3D-18 / R(2+1)D on MACE: the exporter reduced H and W only, leaving D (the file's
    [1,512,1,1,4] could not be flattened to [1,512]); now D, H and W, checked by edgeconv's reader
    and by MACE's own mace_run."""

    model = _global_pool_3d_model(op)
    path = tmp_path / "pool.onnx"
    onnx.save(model, path)
    result = port(str(path), to="mace", hw="cpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    assert target_stage(result).outputs[0].metrics.max_abs < 1e-6

    x = np.random.default_rng(0).standard_normal((1, 3, 2, 4, 5)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = _mace_cpu_output(model, "pool", x, tmp_path)
    assert float(np.abs(got.reshape(ref.shape) - ref).max()) < 1e-5


def test_nodes_after_a_post_processing_cut_are_not_rewritten(tmp_path):
    """A YOLO-style head on MACE's GPU: the Transpose after the last conv goes to post-processing
    (the GPU has no Transpose and no rule helps); the Slice after it used to be rewritten
    into a shift convolution first, which post-processing cannot run, so the cut broke and the port
    raised.  Everything downstream of a post-processed node now stays for the cut."""
    from converter.legalize.apply import legalize

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 2])
    inits = [numpy_helper.from_array(rng.standard_normal((6, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 16, 6], np.int64), "shape"),
             numpy_helper.from_array(np.array([4], np.int64), "s"), numpy_helper.from_array(np.array([6], np.int64), "e"),
             numpy_helper.from_array(np.array([2], np.int64), "ax")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1], name="transpose"),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="reshape"),
             helper.make_node("Slice", ["r", "s", "e", "ax"], ["sl"], name="slice"),
             helper.make_node("Sigmoid", ["sl"], ["y"], name="sigmoid")]
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    legal = legalize(model, "mace", "gpu")
    assert legal.postprocess_nodes == {"transpose"}  # MACE's GPU transposes nothing
    assert not any(node == "slice" for _, node in legal.applied), legal.applied
    path = tmp_path / "head.onnx"
    onnx.save(model, path)
    result = port(str(path), to="mace", hw="gpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    stage = next(s for s in result.verification.stages if s.name.startswith("target:"))
    assert stage.outputs[0].metrics.max_abs < 1e-6


def test_coreml_channel_shuffle_runs_as_an_interleaved_concat(tmp_path):
    """ShuffleNetV2's channel shuffle (concat, reshape to [B, 2, C, H, W], transpose, reshape back)
    becomes one ``concat(interleave=True)`` in coremltools' pass pipeline; the MIL executor ran
    it as a plain concat (coremltools' value inference ignores ``interleave``), so every
    ShuffleNet port to CoreML reported wrong numbers (max abs 55)."""
    pytest.importorskip("coremltools")
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 4, 3, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 3, 3])
    inits = [numpy_helper.from_array(np.array([1, 2, 4, 3, 3], np.int64), "split_shape"),
             numpy_helper.from_array(np.array([1, 8, 3, 3], np.int64), "merged")]
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Reshape", ["c", "split_shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "merged"], ["y"])]
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", [a, b], [y], inits), opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    path = tmp_path / "shuffle.onnx"
    onnx.save(model, path)
    result = port(str(path), to="coreml", hw="cpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    assert target_stage(result).outputs[0].metrics.max_abs == 0.0

    from converter.targets.coreml.mil_executor import load_program

    package = next(p for p in (tmp_path / "out").iterdir() if p.suffix == ".mlpackage")
    ops = [(op.op_type, op.inputs.get("interleave")) for op in load_program(package).functions["main"].operations]
    assert any(t == "concat" and i is not None and bool(i.val) for t, i in ops), ops


def test_mace_concat_with_a_constant_operand(tmp_path):
    """A ViT's class token: Concat(constant [1, 1, C], tokens [1, N, C]) on axis 1, refused by the
    MACE exporter before ("constant Concat operand"); edgeconv's reader and mace_run agree."""

    rng = np.random.default_rng(2)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 6])
    token = numpy_helper.from_array(rng.standard_normal((1, 1, 6)).astype(np.float32), "token")
    nodes = [helper.make_node("Concat", ["token", "x"], ["y"], axis=1)]
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [token]), opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    path = tmp_path / "cls.onnx"
    onnx.save(model, path)
    result = port(str(path), to="mace", hw="cpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    assert target_stage(result).outputs[0].metrics.max_abs == 0.0

    xv = rng.standard_normal((1, 4, 6)).astype(np.float32)
    got = _mace_cpu_output(model, "cls", xv, tmp_path)
    ref = np.concatenate([numpy_helper.to_array(token), xv], 1)
    assert float(np.abs(got.reshape(ref.shape) - ref).max()) == 0.0


def test_mace_average_pool_counting_the_padding(tmp_path):
    """MaxViT's downsampling AvgPool2d(3, 2, padding=1) counts the padding (count_include_pad=1);
    MACE's pooling averages valid elements only and the exporter refused it.  Now a zero Pad op
    and an unpadded pool, checked by edgeconv's reader and by mace_run."""

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 7, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            count_include_pad=1)
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    path = tmp_path / "pool.onnx"
    onnx.save(model, path)
    result = port(str(path), to="mace", hw="cpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    assert target_stage(result).outputs[0].metrics.max_abs < 1e-6

    xv = np.random.default_rng(3).standard_normal((1, 3, 7, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": xv})[0]
    got = _mace_cpu_output(model, "pool", xv, tmp_path)
    assert float(np.abs(got.reshape(ref.shape) - ref).max()) < 1e-5


def test_reshape_allowzero_without_zeros_is_normalized_away():
    """The dynamo exporter (the TorchScript loader's second route, .pt2 files) writes Reshape
    allowzero=1 everywhere; MACE refused it.  With a constant target without 0 it means the same
    as the default and normalization drops it; with a 0 in the target it stays."""
    from converter.frontend.normalize import normalize

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    inits = [numpy_helper.from_array(np.array([6, 4], np.int64), "s1"),
             numpy_helper.from_array(np.array([0, 12], np.int64), "s2")]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["y"], allowzero=1),
             helper.make_node("Reshape", ["x", "s2"], ["z"], allowzero=1)]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y, z], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out = normalize(model)
    allowzero = {n.output[0]: [a.i for a in n.attribute if a.name == "allowzero"] for n in out.graph.node}
    assert allowzero == {"y": [], "z": [1]}


def test_tflite_division_by_a_scalar_constant(tmp_path):
    """Attention's q / sqrt(d) with a 0-d divisor (the dynamo route's ViT-B/16): the TFLite
    lowering to MUL by the reciprocal built a Constant from a numpy scalar and raised."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6])
    scale = numpy_helper.from_array(np.array(1.4142135, np.float32), "scale")
    model = onnx.shape_inference.infer_shapes(helper.make_model(
        helper.make_graph([helper.make_node("Div", ["x", "scale"], ["y"])], "g", [x], [y], [scale]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    path = tmp_path / "div.onnx"
    onnx.save(model, path)
    result = port(str(path), to="tflite", hw="cpu", out=tmp_path / "out")
    assert result.status == "ok", result.reason
    assert target_stage(result).outputs[0].metrics.max_abs < 1e-6
