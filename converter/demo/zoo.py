"""A small model zoo in plain torch with seeded weights, shared by tests, demo and benchmarks.

Every architecture is written here (no torchvision, nothing downloaded).  ``size="test"`` keeps
the models small enough for fast tests; ``size="full"`` is for benchmarks.

    from converter import zoo
    path = zoo.export_onnx("detector", "det.onnx")      # torch -> ONNX (opset 17)
    feeds = zoo.example_inputs("detector", seed=0)       # {input name: np.ndarray}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import numpy as np

NAMES = (
    "mobilenetv2",
    "resnet",
    "unet",
    "superres",
    "detector",
    "transformer",
    "normalized_input",
)


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[[str], object]  # size -> torch.nn.Module (eval mode, seeded)
    input_shapes: Callable[[str], dict[str, tuple[int, ...]]]
    output_names: tuple[str, ...]
    description: str


def _torch():
    import torch  #  (lazy: the CLI must start without torch)

    return torch


def _modules():
    """The zoo's architectures by name: (torch module class, constructor arguments per size).
    The classes are defined here, lazily, so importing this file does not import torch."""
    torch = _torch()
    conv_bn_relu = _conv_bn_relu(torch.nn)
    return {name: (define(torch, conv_bn_relu), sizes) for name, (define, sizes) in _ARCHITECTURES.items()}


def _conv_bn_relu(nn):
    """Conv -> BatchNorm -> ReLU6 (or ReLU), the block several architectures share."""

    class ConvBNReLU(nn.Sequential):
        def __init__(self, cin, cout, k=3, s=1, groups=1, relu6=True):
            super().__init__(
                nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU6() if relu6 else nn.ReLU(),
            )

    return ConvBNReLU


def _mobilenetv2(torch, ConvBNReLU):
    nn = torch.nn

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = [] if expand == 1 else [ConvBNReLU(cin, hidden, 1)]
            layers += [
                ConvBNReLU(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_res else y

    class MobileNetV2(nn.Module):
        def __init__(self, width=16, num_classes=10, cfg=((1, 16, 1, 1), (6, 24, 2, 2), (6, 24, 1, 1))):
            super().__init__()
            layers = [ConvBNReLU(3, width, 3, 2)]
            cin = width
            for t, c, n, s in cfg:
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(ConvBNReLU(cin, 64, 1))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(64, num_classes))

        def forward(self, x):
            x = self.pool(self.features(x)).flatten(1)
            return self.classifier(x)

    return MobileNetV2


def _resnet(torch, ConvBNReLU):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self, widths=(16, 32, 64), blocks=(1, 1, 1), num_classes=10):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(),
                nn.MaxPool2d(3, 2, 1),
            )
            layers, cin = [], widths[0]
            for i, (w, n) in enumerate(zip(widths, blocks)):
                for j in range(n):
                    layers.append(BasicBlock(cin, w, 2 if (j == 0 and i > 0) else 1))
                    cin = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, num_classes)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet


def _unet(torch, ConvBNReLU):
    nn = torch.nn

    class UNet(nn.Module):
        def __init__(self, base=8, num_classes=3):
            super().__init__()
            b = base
            self.enc1 = ConvBNReLU(3, b, relu6=False)
            self.enc2 = nn.Sequential(nn.MaxPool2d(2), ConvBNReLU(b, 2 * b, relu6=False))
            self.enc3 = nn.Sequential(nn.MaxPool2d(2), ConvBNReLU(2 * b, 4 * b, relu6=False))
            self.up2 = nn.ConvTranspose2d(4 * b, 2 * b, 2, 2)
            self.dec2 = ConvBNReLU(4 * b, 2 * b, relu6=False)
            self.up1 = nn.ConvTranspose2d(2 * b, b, 2, 2)
            self.dec1 = ConvBNReLU(2 * b, b, relu6=False)
            self.head = nn.Conv2d(b, num_classes, 1)

        def forward(self, x):
            e1 = self.enc1(x)
            e2 = self.enc2(e1)
            e3 = self.enc3(e2)
            d2 = self.dec2(torch.cat([self.up2(e3), e2], 1))
            d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
            return self.head(d1)

    return UNet


def _superres(torch, ConvBNReLU):
    nn = torch.nn

    class SuperRes(nn.Module):
        """FSRCNN-style: feature extraction, shrinking, mapping, expanding, 9x9 stride-3 deconv."""

        def __init__(self, d=16, s=8, m=2, scale=3):
            super().__init__()
            layers = [nn.Conv2d(1, d, 5, 1, 2), nn.PReLU(d), nn.Conv2d(d, s, 1), nn.PReLU(s)]
            for _ in range(m):
                layers += [nn.Conv2d(s, s, 3, 1, 1), nn.PReLU(s)]
            layers += [nn.Conv2d(s, d, 1), nn.PReLU(d)]
            self.body = nn.Sequential(*layers)
            self.deconv = nn.ConvTranspose2d(d, 1, 9, scale, 4, output_padding=scale - 1)

        def forward(self, x):
            return self.deconv(self.body(x))

    return SuperRes


def _detector(torch, ConvBNReLU):
    nn = torch.nn

    class Detector(nn.Module):
        """A tiny SSD-like head; its trailing ops are Sub, Softmax and Mul, and the Mul takes a
        skip connection (an objectness map) from earlier layers."""

        def __init__(self, c=16, anchors=4, num_classes=5):
            super().__init__()
            self.backbone = nn.Sequential(
                ConvBNReLU(3, c, 3, 2, relu6=False), ConvBNReLU(c, c, 3, 1, relu6=False),
                ConvBNReLU(c, 2 * c, 3, 2, relu6=False),
            )
            self.objectness = nn.Conv2d(c, anchors, 3, 2, 1)
            self.cls = nn.Conv2d(2 * c, anchors * num_classes, 3, 1, 1)
            self.box = nn.Conv2d(2 * c, anchors * 4, 3, 1, 1)
            self.anchors, self.num_classes = anchors, num_classes
            self.register_buffer("prior", torch.linspace(0.0, 1.0, anchors * 4).reshape(1, anchors * 4, 1, 1))

        def forward(self, x):
            f1 = self.backbone[1](self.backbone[0](x))
            f2 = self.backbone[2](f1)
            n, _, h, w = f2.shape
            logits = self.cls(f2).reshape(n, self.anchors, self.num_classes, h, w)
            scores = torch.softmax(logits - logits.amax(dim=2, keepdim=True), dim=2)
            obj = torch.sigmoid(self.objectness(f1)).reshape(n, self.anchors, 1, h, w)
            scores = scores * obj
            boxes = self.box(f2) - self.prior
            return scores, boxes

    return Detector


def _transformer(torch, ConvBNReLU):
    nn = torch.nn

    class TransformerBlock(nn.Module):
        def __init__(self, dim=32, heads=4, mlp=64, tokens=16):
            super().__init__()
            self.heads, self.dim = heads, dim
            self.ln1 = nn.LayerNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim)
            self.proj = nn.Linear(dim, dim)
            self.ln2 = nn.LayerNorm(dim)
            self.fc1 = nn.Linear(dim, mlp)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(mlp, dim)

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (d // h) ** -0.5, dim=-1)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    return TransformerBlock


def _normalized_input(torch, ConvBNReLU):
    nn = torch.nn

    class NormalizedInput(nn.Module):
        """Subtracts a per-channel mean and divides by a std at its input, then a small CNN."""

        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1))
            self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1))
            self.body = nn.Sequential(ConvBNReLU(3, 8, 3, 2, relu6=False), nn.Conv2d(8, 4, 3, 1, 1))

        def forward(self, x):
            return self.body((x - self.mean) / self.std)

    return NormalizedInput


#: name -> (define(torch, ConvBNReLU) -> the module class, constructor arguments per size).
_ARCHITECTURES = {
    "mobilenetv2": (_mobilenetv2, dict(test={}, full=dict(width=32, cfg=(
        (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1))))),
    "resnet": (_resnet, dict(test={}, full=dict(widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2)))),
    "unet": (_unet, dict(test={}, full=dict(base=32))),
    "superres": (_superres, dict(test={}, full=dict(d=56, s=12, m=4))),
    "detector": (_detector, dict(test={}, full=dict(c=64))),
    "transformer": (_transformer, dict(test={}, full=dict(dim=192, heads=3, mlp=768, tokens=197))),
    "normalized_input": (_normalized_input, dict(test={}, full={})),
}


_INPUTS = {
    "mobilenetv2": dict(test=(1, 3, 32, 32), full=(1, 3, 224, 224)),
    "resnet": dict(test=(1, 3, 32, 32), full=(1, 3, 224, 224)),
    "unet": dict(test=(1, 3, 32, 32), full=(1, 3, 128, 128)),
    "superres": dict(test=(1, 1, 16, 16), full=(1, 1, 64, 64)),
    "detector": dict(test=(1, 3, 32, 32), full=(1, 3, 128, 128)),
    "transformer": dict(test=(1, 16, 32), full=(1, 197, 192)),
    "normalized_input": dict(test=(1, 3, 32, 32), full=(1, 3, 224, 224)),
}

_OUTPUTS = {"detector": ("scores", "boxes")}


def input_shapes(name: str, size: str = "test") -> dict[str, tuple[int, ...]]:
    _check(name)
    return {"input": _INPUTS[name][size]}


def output_names(name: str) -> tuple[str, ...]:
    _check(name)
    return _OUTPUTS.get(name, ("output",))


def build(name: str, size: str = "test", seed: int = 0):
    """The torch module, in eval mode, with weights (and BN statistics) drawn from ``seed``."""
    _check(name)
    torch = _torch()
    cls, kwargs = _modules()[name]
    torch.manual_seed(seed)
    model = cls(**kwargs[size])
    # Non-trivial BatchNorm statistics, so that folding BN is really exercised.
    gen = torch.Generator().manual_seed(seed + 1)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=gen) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=gen) * 0.5 + 0.75)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=gen) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.num_features, generator=gen) * 0.1)
    return model.eval()


def example_inputs(name: str, size: str = "test", seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in input_shapes(name, size).items()}


def export_onnx(name: str, path: str | Path, size: str = "test", seed: int = 0, opset: int = 17) -> Path:
    """Export the zoo model to ONNX with torch's TorchScript-based exporter (fast, opset 17)."""
    import warnings

    torch = _torch()
    model = build(name, size, seed)
    shapes = input_shapes(name, size)
    args = tuple(torch.zeros(s) for s in shapes.values())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=opset,
            input_names=list(shapes), output_names=list(output_names(name)),
        )
    return path


def _check(name: str) -> None:
    if name not in NAMES:
        raise KeyError(f"unknown zoo model '{name}'; choose one of: {', '.join(NAMES)}")
