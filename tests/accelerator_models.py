"""Small seeded models with the shapes real architectures give accelerators trouble with: a ViT
encoder (rank-5 qkv, exact GELU), a 3-D ResNet block stack (R3D-18's layers), attention written
as Einsum, grouped convolutions and an exact-GELU MLP.  Torch modules are exported to ONNX in
memory; nothing is downloaded."""

from __future__ import annotations

import io

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _export(module, example, names=("x",)) -> onnx.ModelProto:
    import torch

    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module.eval(), example, buf, opset_version=17, dynamo=False,
                          input_names=list(names), output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


def vit(seed: int = 0) -> onnx.ModelProto:
    """Patch embedding, one timm-style encoder block (qkv.reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4),
    q, k, v = qkv[0], qkv[1], qkv[2]; nn.GELU MLP), mean pool, head. Input [1, 3, 16, 16]."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Attention(nn.Module):
        def __init__(self, dim=32, heads=4):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = ((q @ k.transpose(-2, -1)) * self.head_dim ** -0.5).softmax(-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))

    class ViT(nn.Module):
        def __init__(self, dim=32):
            super().__init__()
            self.patch = nn.Conv2d(3, dim, 4, 4)
            self.norm1, self.attn, self.norm2 = nn.LayerNorm(dim), Attention(dim), nn.LayerNorm(dim)
            self.mlp = nn.Sequential(nn.Linear(dim, 64), nn.GELU(), nn.Linear(64, dim))
            self.head = nn.Linear(dim, 10)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = x + self.attn(self.norm1(x))
            x = x + self.mlp(self.norm2(x))
            return self.head(x.mean(1))

    return _export(ViT(), (torch.randn(1, 3, 16, 16),))


def r3d(seed: int = 0) -> onnx.ModelProto:
    """R3D-18's layers at toy width: a (3,7,7) stem, two BasicBlocks of 3x3x3 Conv3d (one strided,
    with a 1x1x1 projection), AdaptiveAvgPool3d, Linear. Input [1, 3, 4, 16, 16]."""
    import torch
    from torch import nn

    torch.manual_seed(seed)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout)
            self.c2, self.b2 = nn.Conv3d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm3d(cout)
            self.short = (nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False), nn.BatchNorm3d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.short(x))

    class R3D(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False),
                                      nn.BatchNorm3d(8), nn.ReLU())
            self.layer1, self.layer2 = Block(8, 8, 1), Block(8, 16, 2)
            self.pool, self.fc = nn.AdaptiveAvgPool3d(1), nn.Linear(16, 5)

        def forward(self, x):
            return self.fc(self.pool(self.layer2(self.layer1(self.stem(x)))).flatten(1))

    net = R3D()
    gen = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm3d):  # non-trivial statistics, so the BN folding is exercised
            m.running_mean.copy_(torch.rand(m.num_features, generator=gen) * 0.4 - 0.2)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    return _export(net, (torch.randn(1, 3, 4, 16, 16),))


def gelu_mlp(seed: int = 0) -> onnx.ModelProto:
    """Linear → nn.GELU() (exported as the exact Erf-GELU subgraph) → Linear. Input [1, 8, 16]."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return _export(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)), (torch.randn(1, 8, 16),))


def _model(nodes, inputs, inits, outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _rnd(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def einsum_attention(seed: int = 0, ellipsis: bool = False) -> onnx.ModelProto:
    """MaxViT-style attention spelled with Einsum: q·kᵀ (bhqd,bhkd->bhqk), softmax, ·v, and a
    channel mix (bchw,kc->bkhw-style with a constant weight). Inputs q, k, v [1, 2, 6, 4], x [1, 3, 4, 5]."""
    rng = np.random.default_rng(seed)
    first = "...qd,...kd->...qk" if ellipsis else "bhqd,bhkd->bhqk"
    second = "...qk,...kd->...qd" if ellipsis else "bhqk,bhkd->bhqd"
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation=first),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "v"], ["o"], equation=second),
             helper.make_node("Relu", ["o"], ["y"]),
             helper.make_node("Einsum", ["x", "w"], ["z"], equation="nchw,kc->nkhw")]
    inputs = {"q": [1, 2, 6, 4], "k": [1, 2, 6, 4], "v": [1, 2, 6, 4], "x": [1, 3, 4, 5]}
    return _model(nodes, inputs, {"w": _rnd(rng, 6, 3)}, outputs=("y", "z"))


def grouped_convs(seed: int = 0) -> onnx.ModelProto:
    """Conv(group 2, ResNeXt-style) → ReLU → depthwise Conv with multiplier 2 → ReLU → Conv 1x1.
    Input [1, 4, 8, 8]."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w2", "b2"], ["c"], group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["cr"]),
             helper.make_node("Conv", ["cr", "w3", "b3"], ["y"])]
    inits = {"w1": _rnd(rng, 8, 2, 3, 3), "b1": _rnd(rng, 8), "w2": _rnd(rng, 16, 1, 3, 3), "b2": _rnd(rng, 16),
             "w3": _rnd(rng, 4, 16, 1, 1), "b3": _rnd(rng, 4)}
    return _model(nodes, {"x": [1, 4, 8, 8]}, inits)


def conv_transpose(seed: int = 0, **attrs) -> onnx.ModelProto:
    """x [1, 4, 5, 6] → ConvTranspose(**attrs, 4 → 6 channels, bias) → Relu (a decoder stage)."""
    rng = np.random.default_rng(seed)
    group = attrs.get("group", 1)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], **attrs),
             helper.make_node("Relu", ["t"], ["y"])]
    return _model(nodes, {"x": [1, 4, 5, 6]}, {"w": _rnd(rng, 4, 6 // group, 3, 3), "b": _rnd(rng, 6) + 0.5})


def swin_windows(seed: int = 0) -> onnx.ModelProto:
    """Swin's shifted-window attention at toy size: x [1, 8, 8, 4] (B, H, W, C) → window partition
    (Reshape [1, 2, 4, 2, 4, 4] → Transpose(0,1,3,2,4,5) → [4, 16, 4]) → scores t·tᵀ → view
    [1, 4, 1, 16, 16] + the shift mask → Softmax → ·t → window reverse (rank 6 again) → y [1, 8, 8, 4]."""
    rng = np.random.default_rng(seed)
    mask = np.where(rng.random((1, 4, 1, 16, 16)) > 0.7, -100.0, 0.0).astype(np.float32)
    N = helper.make_node
    nodes = [N("MatMul", ["x", "w"], ["xp"]), N("Reshape", ["xp", "s6"], ["a"]),
             N("Transpose", ["a"], ["b"], perm=[0, 1, 3, 2, 4, 5]), N("Reshape", ["b", "win"], ["t"]),
             N("Transpose", ["t"], ["tt"], perm=[0, 2, 1]), N("MatMul", ["t", "tt"], ["s"]),
             N("Reshape", ["s", "s5"], ["s5v"]), N("Add", ["s5v", "mask"], ["m"]), N("Reshape", ["m", "s3"], ["m3"]),
             N("Softmax", ["m3"], ["p"], axis=-1), N("MatMul", ["p", "t"], ["o"]),
             N("Reshape", ["o", "s6b"], ["c"]), N("Transpose", ["c"], ["d"], perm=[0, 1, 3, 2, 4, 5]),
             N("Reshape", ["d", "s4"], ["y"])]
    inits = {"w": _rnd(rng, 4, 4), "s6": np.int64([1, 2, 4, 2, 4, 4]), "win": np.int64([4, 16, 4]),
             "s5": np.int64([1, 4, 1, 16, 16]), "mask": mask, "s3": np.int64([4, 16, 16]),
             "s6b": np.int64([1, 2, 2, 4, 4, 4]), "s4": np.int64([1, 8, 8, 4])}
    return _model(nodes, {"x": [1, 8, 8, 4]}, inits)
