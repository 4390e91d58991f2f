"""Seeded models for benchmarks/bench_legalize.py: synthetic block stacks and two torch stacks.

* :func:`synthetic_model` - ONNX built with ``onnx.helper``: a stem Conv, then ``blocks``
  ConvNeXt-style blocks of 15 nodes each (depthwise 7x7 Conv, Transpose, LayerNormalization,
  Linear, exact GELU as Div/Erf/Add/Mul/Mul, Linear, layer scale, Transpose, residual Add).
  Every block holds one Erf (a rewrite on ``tnn``/``arm``) and one LayerNormalization (a rewrite
  on ``mace``/``cpu``).  The width changes every 4 blocks (16, 24, 32, ...), so not all blocks
  look alike.
* :func:`convnext_model` - the same block written in plain torch (stages of 3, 3, 9, 3 blocks as
  in ConvNeXt-Tiny, narrow channels), exported with torch's ONNX exporter: ~290 nodes, 18 Erf.
* :func:`swin_model` - Swin-style shifted-window attention in plain torch (window partition with
  6-D Reshape/Transpose, cyclic shift, relative position bias, patch merging), exported likewise.

Nothing is downloaded; every weight comes from ``seed``.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper

WIDTHS = (16, 24, 32)
BLOCK_NODES = 15


def synthetic_model(blocks: int, seed: int = 0, hw: int = 8) -> onnx.ModelProto:
    """A stem Conv, ``blocks`` ConvNeXt-style blocks of 15 nodes (plus a 1x1 Conv wherever the
    width changes, every 4 blocks) and a 2-node head."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(name, value):
        arr = np.asarray(value, dtype=np.float32)
        inits.append(onnx.numpy_helper.from_array(arr, name))
        return name

    def ints(name, values):
        inits.append(onnx.numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    c_in = 3
    x = "input"
    c = WIDTHS[0]
    nodes.append(helper.make_node("Conv", [x, const("stem_w", rng.standard_normal((c, c_in, 1, 1)) * 0.3)],
                                  ["stem"], name="stem", kernel_shape=[1, 1]))
    x = "stem"
    for b in range(blocks):
        width = WIDTHS[(b // 4) % len(WIDTHS)]
        p = f"b{b}_"
        if width != c:  # a width change: a 1x1 Conv projects to the new width
            nodes.append(helper.make_node(
                "Conv", [x, const(p + "proj_w", rng.standard_normal((width, c, 1, 1)) * 0.3)],
                [p + "proj"], name=p + "proj", kernel_shape=[1, 1]))
            x, c = p + "proj", width
        hidden = 4 * c
        nodes += [
            helper.make_node("Conv", [x, const(p + "dw_w", rng.standard_normal((c, 1, 7, 7)) * 0.1),
                                      const(p + "dw_b", rng.standard_normal(c) * 0.1)],
                             [p + "dw"], name=p + "dw", kernel_shape=[7, 7], pads=[3, 3, 3, 3], group=c),
            helper.make_node("Transpose", [p + "dw"], [p + "nhwc"], name=p + "to_nhwc", perm=[0, 2, 3, 1]),
            helper.make_node("LayerNormalization", [p + "nhwc", const(p + "ln_g", 1 + 0.1 * rng.standard_normal(c)),
                                                    const(p + "ln_b", 0.1 * rng.standard_normal(c))],
                             [p + "ln"], name=p + "ln", axis=-1, epsilon=1e-6),
            helper.make_node("MatMul", [p + "ln", const(p + "w1", rng.standard_normal((c, hidden)) / np.sqrt(c))],
                             [p + "fc1"], name=p + "fc1"),
            helper.make_node("Add", [p + "fc1", const(p + "b1", 0.1 * rng.standard_normal(hidden))],
                             [p + "fc1b"], name=p + "fc1_bias"),
            helper.make_node("Div", [p + "fc1b", const(p + "sqrt2", np.sqrt(2.0))], [p + "u"], name=p + "gelu_div"),
            helper.make_node("Erf", [p + "u"], [p + "e"], name=p + "gelu_erf"),
            helper.make_node("Add", [p + "e", const(p + "one", 1.0)], [p + "a"], name=p + "gelu_add"),
            helper.make_node("Mul", [p + "fc1b", p + "a"], [p + "m"], name=p + "gelu_mul"),
            helper.make_node("Mul", [p + "m", const(p + "half", 0.5)], [p + "g"], name=p + "gelu_half"),
            helper.make_node("MatMul", [p + "g", const(p + "w2", rng.standard_normal((hidden, c)) / np.sqrt(hidden))],
                             [p + "fc2"], name=p + "fc2"),
            helper.make_node("Add", [p + "fc2", const(p + "b2", 0.1 * rng.standard_normal(c))],
                             [p + "fc2b"], name=p + "fc2_bias"),
            helper.make_node("Mul", [p + "fc2b", const(p + "gamma", 0.1 * np.ones(c))], [p + "ls"], name=p + "scale"),
            helper.make_node("Transpose", [p + "ls"], [p + "nchw"], name=p + "to_nchw", perm=[0, 3, 1, 2]),
        ]
        nodes.append(helper.make_node("Add", [x, p + "nchw"], [p + "out"], name=p + "residual"))
        x = p + "out"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["output"], name="flatten", axis=1))
    graph = helper.make_graph(nodes, f"synthetic_{blocks}",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c_in, hw, hw])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def blocks_for(nodes: int) -> int:
    """The block count whose synthetic model has about ``nodes`` nodes (15 per block, a width
    change every 4 blocks, 3 for stem and head)."""
    return max(1, round((nodes - 3) / (BLOCK_NODES + 0.25)))


def _export(module, shape, seed) -> onnx.ModelProto:
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.zeros(shape),), buf, dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"])
    return onnx.load_from_string(buf.getvalue())


def convnext_model(seed: int = 0, dims=(16, 24, 32, 48), depths=(3, 3, 9, 3)) -> onnx.ModelProto:
    """ConvNeXt-Tiny's layout (3, 3, 9, 3 blocks) with narrow channels, on a 1x3x64x64 input."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.norm = nn.LayerNorm(c, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
            self.act = nn.GELU()
            self.gamma = nn.Parameter(torch.full((c,), 0.1))

        def forward(self, x):
            y = self.dw(x).permute(0, 2, 3, 1)
            y = self.fc2(self.act(self.fc1(self.norm(y)))) * self.gamma
            return x + y.permute(0, 3, 1, 2)

    class ChannelsFirstNorm(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm = nn.LayerNorm(c, eps=1e-6)

        def forward(self, x):
            return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [nn.Conv2d(3, dims[0], 4, stride=4), ChannelsFirstNorm(dims[0])]
            for i, (c, d) in enumerate(zip(dims, depths)):
                if i:
                    layers += [ChannelsFirstNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], c, 2, stride=2)]
                layers += [Block(c) for _ in range(d)]
            self.features = nn.Sequential(*layers)
            self.head = nn.Linear(dims[-1], 10)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    torch.manual_seed(seed)
    return _export(ConvNeXt(), (1, 3, 64, 64), seed)


def swin_model(seed: int = 0, dims=(16, 32, 64, 128), depths=(2, 2, 6, 2), heads=(1, 2, 4, 8),
               window: int = 4) -> onnx.ModelProto:
    """Swin-T's layout (2, 2, 6, 2 blocks, shifted windows, patch merging), narrow, 1x3x128x128."""
    import torch
    from torch import nn

    def partition(x, w):  # (B, H, W, C) -> (B*nW, w*w, C)
        b, h, wd, c = x.shape
        x = x.reshape(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, w * w, c)

    def merge(x, w, b, h, wd):
        c = x.shape[-1]
        x = x.reshape(b, h // w, wd // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, h, wd, c)

    class Attention(nn.Module):
        def __init__(self, c, n_heads):
            super().__init__()
            self.n_heads, self.scale = n_heads, (c // n_heads) ** -0.5
            self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, n_heads) * 0.02)
            coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
            rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
            self.register_buffer("index", (rel[..., 0] * (2 * window - 1) + rel[..., 1]).flatten())

        def forward(self, x):
            n, t, c = x.shape
            qkv = self.qkv(x).reshape(n, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q * self.scale) @ k.transpose(-2, -1)
            bias = self.bias_table[self.index].reshape(t, t, -1).permute(2, 0, 1)
            attn = (attn + bias.unsqueeze(0)).softmax(-1)
            return self.proj((attn @ v).transpose(1, 2).reshape(n, t, c))

    class Block(nn.Module):
        def __init__(self, c, n_heads, shift):
            super().__init__()
            self.shift = shift
            self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.attn = Attention(c, n_heads)
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x):
            b, h, w, c = x.shape
            y = self.norm1(x)
            if self.shift:
                y = torch.roll(y, (-self.shift, -self.shift), (1, 2))
            y = merge(self.attn(partition(y, window)), window, b, h, w)
            if self.shift:
                y = torch.roll(y, (self.shift, self.shift), (1, 2))
            x = x + y
            return x + self.mlp(self.norm2(x))

    class PatchMerging(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm, self.reduce = nn.LayerNorm(4 * c), nn.Linear(4 * c, 2 * c, bias=False)

        def forward(self, x):
            x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
            return self.reduce(self.norm(x))

    class Swin(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Conv2d(3, dims[0], 4, stride=4)
            layers = []
            for i, (c, d, n_heads) in enumerate(zip(dims, depths, heads)):
                if i:
                    layers.append(PatchMerging(dims[i - 1]))
                layers += [Block(c, n_heads, window // 2 if j % 2 else 0) for j in range(d)]
            self.layers = nn.Sequential(*layers)
            self.norm, self.head = nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 10)

        def forward(self, x):
            x = self.layers(self.embed(x).permute(0, 2, 3, 1))
            return self.head(self.norm(x).mean((1, 2)))

    torch.manual_seed(seed)
    return _export(Swin(), (1, 3, 128, 128), seed)
