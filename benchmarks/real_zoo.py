"""Port published architectures (torchvision, timm; random init) to every target.

    .venv/bin/python benchmarks/real_zoo.py [--models resnet18,swin_t] [--targets cpu|accel|all|tflite:cpu,...]
                                            [--out DIR] [--json results.json] [--runtimes DIR]

Needs the `zoo` extra (`pip install -e '.[zoo]'`: torchvision 0.28.0 and timm).  Every model is
built with seeded random weights (nothing downloads), its BatchNorm statistics and affine
parameters randomized (default statistics, mean 0 / variance 1, would hide a BN-folding bug), then
traced with a fixed input shape and saved as TorchScript (.pt).  edgeconv loads and normalizes
each .pt once and ports it to each framework's CPU (tflite cpu, tnn arm and x86, mace cpu, coreml
cpu) and to one accelerator per framework (tflite gpu, tnn opencl, mace gpu, coreml ane).

``--runtimes DIR`` (default: ``../shared/runtimes`` next to the checkout, when it exists) names
the real TNN and MACE runtimes (``DIR/tnn/bin/tnn_run``, ``DIR/mace/bin/mace_run``; see
converter/runtimes): TNN ports (arm and x86 files, run on the host's X86 device) and MACE CPU ports
are then judged by TNN's and MACE's own interpreters instead of edgeconv's readers.  Environment
variables EDGECONV_TNN_RUNTIME / EDGECONV_MACE_RUNTIME, when set, win.

Each cell of the table is one port:

    pass      exported and verified within tolerance by the target's oracle (column `oracle`:
              LiteRT for TFLite, tnn_run / mace_run with --runtimes, else edgeconv's readers of
              the written files, see converter/targets/*/; the MIL executor for CoreML)
    wrong     exported, but the outputs differ beyond tolerance (port status verify_failed)
    refused   no remedy on that framework x hardware (port status unsupported) - reason listed
    custom    the port needs a custom layer
    error     an exception: loading or a bug (listed)

Numbers, not assertions: nothing here is a test.  The cases it found broken are unit tests on
small hand-built models (tests/test_real_zoo_patterns.py).

``--models transformers`` (or their names, see ``--list``) runs the transformer set of
benchmarks/zoo_transformers.py instead: HuggingFace encoders with int64 ids and masks, Whisper's
encoder and HF vision models, each from TorchScript, ``.pt2`` and torch's default ONNX export
(``--sources``), one table row per model and source.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from zoo_judging import (FP16_TARGETS, NOISE_FACTOR, Cell, classify, import_torchvision,  # noqa: E402,F401
                         noise_floor, randomize_batchnorm, tolerance_for)

CPU_TARGETS = (("tflite", "cpu"), ("tnn", "arm"), ("tnn", "x86"), ("mace", "cpu"), ("coreml", "cpu"))
ACCEL_TARGETS = (("tflite", "gpu"), ("tnn", "opencl"), ("mace", "gpu"), ("coreml", "ane"))
SEED = 0


# ------------------------------------------------------------------------------ model builders


def _tv(name, **kw):
    def build():
        tv = import_torchvision()
        return getattr(tv.models, name)(weights=None, **kw)
    return build


def _tv_video(name):
    def build():
        tv = import_torchvision()
        return getattr(tv.models.video, name)(weights=None)
    return build


def _s3d():
    """torchvision's S3D at 16 x 96 x 96: its final AvgPool3d (2, 7, 7) is sized for 224 x 224
    inputs (a 7 x 7 grid); at 96 the grid is 3 x 3, so that one pool's window is (2, 3, 3)."""
    import torch

    tv = import_torchvision()
    model = tv.models.video.s3d(weights=None)
    model.avgpool = torch.nn.AvgPool3d(kernel_size=(2, 3, 3), stride=1)
    return model


def _tv_seg(name):
    def build():
        import torch

        tv = import_torchvision()
        model = getattr(tv.models.segmentation, name)(weights=None, weights_backbone=None, num_classes=21)

        class Segmenter(torch.nn.Module):
            """The dict output ({"out": ...}) as a tensor."""

            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                return self.model(x)["out"]

        return Segmenter()
    return build


def _detection_head(detector: str, doc: str):
    """A torchvision detector's backbone + head: class logits and box regressions per anchor
    (no anchor decoding, no NMS)."""
    import torch

    tv = import_torchvision()
    det = getattr(tv.models.detection, detector)(weights=None, weights_backbone=None, num_classes=91)

    class DetectionHead(torch.nn.Module):
        __doc__ = doc

        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            out = self.head(feats)
            return out["cls_logits"], out["bbox_regression"]

    return DetectionHead()


def _ssdlite_head():
    return _detection_head("ssdlite320_mobilenet_v3_large", "MobileNetV3 backbone + SSDLite head")


def _retinanet_head():
    return _detection_head("retinanet_resnet50_fpn", "ResNet-50 + FPN + RetinaNet head")


def _fasterrcnn_rpn():
    import torch

    tv = import_torchvision()
    det = tv.models.detection.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, num_classes=91)

    class RPNHead(torch.nn.Module):
        """MobileNetV3 + FPN + the region-proposal head: objectness and box deltas per level."""

        def __init__(self):
            super().__init__()
            self.backbone, self.head = det.backbone, det.rpn.head

        def forward(self, x):
            feats = list(self.backbone(x).values())
            logits, deltas = self.head(feats)
            return (*logits, *deltas)

    return RPNHead()


def _yolo_head():
    """A YOLO-style single-scale detector: CSP-ish conv backbone (SiLU) + a decoupled head whose
    output is reshaped to [B, anchors*H*W, 5 + classes] with sigmoid objectness/classes."""
    import torch
    from torch import nn

    def cbs(cin, cout, k=3, s=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

    class YoloStyle(nn.Module):
        def __init__(self, classes=20, anchors=3):
            super().__init__()
            self.anchors, self.outputs = anchors, 5 + classes
            self.backbone = nn.Sequential(cbs(3, 16, 3, 2), cbs(16, 32, 3, 2), cbs(32, 32), cbs(32, 64, 3, 2),
                                          cbs(64, 64), cbs(64, 128, 3, 2), cbs(128, 128, 1))
            self.pool = nn.ModuleList([nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13)])  # SPP
            self.fuse = cbs(512, 128, 1)
            self.head = nn.Conv2d(128, anchors * self.outputs, 1)

        def forward(self, x):
            y = self.backbone(x)
            y = self.fuse(torch.cat([y] + [p(y) for p in self.pool], 1))
            y = self.head(y)
            b, _, h, w = y.shape
            y = y.view(b, self.anchors, self.outputs, h, w).permute(0, 1, 3, 4, 2).reshape(b, -1, self.outputs)
            return torch.cat([y[..., :4], torch.sigmoid(y[..., 4:])], -1)

    return YoloStyle()


def _timm(name, **kw):
    def build():
        import_torchvision()  # timm imports torchvision: the same CPU-build accommodation first
        import timm

        return timm.create_model(name, pretrained=False, **kw)
    return build


def _yolo(kind):
    def build():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from zoo_yolo import build_yolo

        return build_yolo(kind)
    return build


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    build: object
    shape: tuple


#: 224 only where the architecture needs it (MaxViT's 7x7 partitions of a /32 grid, Swin's shifted
#: 7x7 windows, which a smaller grid collapses to no shift).  VGG is left out: its 25088x4096
#: classifier alone makes one port take 35-45 s.
ENTRIES = [
    ZooEntry("resnet18", "classification", _tv("resnet18"), (1, 3, 64, 64)),
    ZooEntry("resnet50", "classification", _tv("resnet50"), (1, 3, 64, 64)),
    ZooEntry("resnext50_32x4d", "classification", _tv("resnext50_32x4d"), (1, 3, 64, 64)),
    ZooEntry("densenet121", "classification", _tv("densenet121"), (1, 3, 64, 64)),
    ZooEntry("regnet_y_400mf", "classification", _tv("regnet_y_400mf"), (1, 3, 64, 64)),
    ZooEntry("efficientnet_b0", "classification", _tv("efficientnet_b0"), (1, 3, 64, 64)),
    ZooEntry("convnext_tiny", "classification", _tv("convnext_tiny"), (1, 3, 64, 64)),
    ZooEntry("googlenet", "classification", _tv("googlenet", aux_logits=False, init_weights=True), (1, 3, 64, 64)),
    ZooEntry("mobilenet_v2", "mobile", _tv("mobilenet_v2"), (1, 3, 96, 96)),
    ZooEntry("mobilenet_v3_small", "mobile", _tv("mobilenet_v3_small"), (1, 3, 96, 96)),
    ZooEntry("mobilenet_v3_large", "mobile", _tv("mobilenet_v3_large"), (1, 3, 96, 96)),
    ZooEntry("shufflenet_v2_x1_0", "mobile", _tv("shufflenet_v2_x1_0"), (1, 3, 96, 96)),
    ZooEntry("mnasnet0_5", "mobile", _tv("mnasnet0_5"), (1, 3, 96, 96)),
    ZooEntry("squeezenet1_1", "mobile", _tv("squeezenet1_1"), (1, 3, 96, 96)),
    ZooEntry("vit_b_16", "transformer", _tv("vit_b_16", image_size=64), (1, 3, 64, 64)),
    ZooEntry("swin_t", "transformer", _tv("swin_t"), (1, 3, 224, 224)),
    ZooEntry("maxvit_t", "transformer", _tv("maxvit_t"), (1, 3, 224, 224)),
    ZooEntry("deit_tiny", "transformer", _timm("deit_tiny_patch16_224", img_size=64), (1, 3, 64, 64)),
    ZooEntry("mobilevit_xxs", "transformer", _timm("mobilevit_xxs"), (1, 3, 64, 64)),
    ZooEntry("fcn_resnet50", "segmentation", _tv_seg("fcn_resnet50"), (1, 3, 64, 64)),
    ZooEntry("deeplabv3_mbv3", "segmentation", _tv_seg("deeplabv3_mobilenet_v3_large"), (1, 3, 64, 64)),
    ZooEntry("lraspp_mbv3", "segmentation", _tv_seg("lraspp_mobilenet_v3_large"), (1, 3, 64, 64)),
    ZooEntry("ssdlite_head", "detection", _ssdlite_head, (1, 3, 128, 128)),
    ZooEntry("retinanet_head", "detection", _retinanet_head, (1, 3, 64, 64)),
    ZooEntry("fasterrcnn_rpn", "detection", _fasterrcnn_rpn, (1, 3, 64, 64)),
    ZooEntry("yolo_style", "detection", _yolo_head, (1, 3, 64, 64)),
    ZooEntry("r3d_18", "video", _tv_video("r3d_18"), (1, 3, 8, 64, 64)),
    ZooEntry("r2plus1d_18", "video", _tv_video("r2plus1d_18"), (1, 3, 8, 64, 64)),
    # issue 30's families: efficient CNNs, hybrids and MLPs from timm, torchvision's newer ones,
    # YOLO-style heads (benchmarks/zoo_yolo.py)
    ZooEntry("efficientvit_b0", "hybrid", _timm("efficientvit_b0"), (1, 3, 64, 64)),
    ZooEntry("levit_128s", "hybrid", _timm("levit_128s", img_size=128), (1, 3, 128, 128)),
    ZooEntry("convnextv2_atto", "classification", _timm("convnextv2_atto"), (1, 3, 64, 64)),
    ZooEntry("ghostnet_100", "mobile", _timm("ghostnet_100"), (1, 3, 96, 96)),
    ZooEntry("mobileone_s0", "mobile", _timm("mobileone_s0"), (1, 3, 96, 96)),
    ZooEntry("repvit_m0_9", "mobile", _timm("repvit_m0_9"), (1, 3, 96, 96)),
    ZooEntry("fastvit_t8", "hybrid", _timm("fastvit_t8"), (1, 3, 64, 64)),
    ZooEntry("efficientformerv2_s0", "hybrid", _timm("efficientformerv2_s0", img_size=64), (1, 3, 64, 64)),
    ZooEntry("edgenext_xx_small", "hybrid", _timm("edgenext_xx_small"), (1, 3, 64, 64)),
    ZooEntry("poolformer_s12", "hybrid", _timm("poolformer_s12"), (1, 3, 64, 64)),
    ZooEntry("pvt_v2_b0", "transformer", _timm("pvt_v2_b0"), (1, 3, 64, 64)),
    ZooEntry("mixer_s32", "mlp", _timm("mixer_s32_224", img_size=64), (1, 3, 64, 64)),
    ZooEntry("lcnet_050", "mobile", _timm("lcnet_050"), (1, 3, 96, 96)),
    ZooEntry("mobilenetv4_conv_small", "mobile", _timm("mobilenetv4_conv_small"), (1, 3, 96, 96)),
    ZooEntry("hrnet_w18_small", "classification", _timm("hrnet_w18_small"), (1, 3, 64, 64)),
    ZooEntry("xcit_nano_12_p16", "transformer", _timm("xcit_nano_12_p16_224", img_size=64), (1, 3, 64, 64)),
    ZooEntry("rexnet_100", "mobile", _timm("rexnet_100"), (1, 3, 96, 96)),
    ZooEntry("tinynet_e", "mobile", _timm("tinynet_e"), (1, 3, 96, 96)),
    ZooEntry("efficientnet_v2_s", "classification", _tv("efficientnet_v2_s"), (1, 3, 64, 64)),
    ZooEntry("regnet_x_400mf", "classification", _tv("regnet_x_400mf"), (1, 3, 64, 64)),
    ZooEntry("shufflenet_v2_x0_5", "mobile", _tv("shufflenet_v2_x0_5"), (1, 3, 96, 96)),
    ZooEntry("inception_v3", "classification", _tv("inception_v3", aux_logits=False, init_weights=True), (1, 3, 96, 96)),
    ZooEntry("swin_v2_t", "transformer", _tv("swin_v2_t"), (1, 3, 224, 224)),
    ZooEntry("s3d", "video", _s3d, (1, 3, 16, 96, 96)),
    ZooEntry("yolov8_pose", "detection", _yolo("v8_pose"), (1, 3, 128, 128)),
    ZooEntry("yolov8_seg", "detection", _yolo("v8_seg"), (1, 3, 128, 128)),
    ZooEntry("yolo11_det", "detection", _yolo("11_det"), (1, 3, 128, 128)),
]
BY_NAME = {e.name: e for e in ENTRIES}

# -- issue 27: the transformer set (benchmarks/zoo_transformers.py): HuggingFace encoders with int64
# ids and masks, Whisper's encoder, HF vision models; each from TorchScript, .pt2 and the dynamo .onnx
TRANSFORMER_SET = "transformers"


def transformer_entries():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import zoo_transformers

    return zoo_transformers


def build(entry: ZooEntry, seed: int = SEED):
    import torch

    torch.manual_seed(seed)
    model = entry.build().eval()
    with torch.no_grad():
        # Heads some architectures zero-initialize (torchvision's ViT, timm's classifiers with
        # zero_init_last): an all-zero output would make every port "pass".
        g = torch.Generator().manual_seed(seed + 1)
        for m in model.modules():
            w = getattr(m, "weight", None)
            if isinstance(m, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) and w is not None and not w.any():
                w.copy_(torch.randn(w.shape, generator=g) / max(1, w[0].numel()) ** 0.5)
    randomize_batchnorm(model, entry.shape, seed)
    return model


# ------------------------------------------------------------------------------------ porting


def port_model(entry: ZooEntry, targets, work: Path, progress=print, sources=("torchscript",)) -> list[Cell]:
    """Every target's cell for ``entry`` saved as each of ``sources`` (``torchscript``: the
    traced ``.pt``; ``pt2``: torch.export; ``onnx``: torch 2.13's default dynamo ONNX export,
    opset 20); rows are named ``name/source`` unless TorchScript alone is asked for."""
    if tuple(sources) == ("torchscript",):
        return _port_source(entry, "torchscript", entry.name, targets, work, progress)
    cells: list[Cell] = []
    for kind in sources:
        cells += _port_source(entry, kind, f"{entry.name}/{kind}", targets, work, progress)
    return cells


_SUFFIX = {"torchscript": ".pt", "pt2": ".pt2", "onnx": ".onnx"}


def _save(entry: ZooEntry, model, kind: str, path: Path) -> None:
    """``model`` saved as ``kind`` with the seeded example input (one saver for every source)."""
    import torch

    example = (torch.randn(entry.shape, generator=torch.Generator().manual_seed(SEED)),)
    transformer_entries().save_source(model, example, kind, path)


def _port_source(entry: ZooEntry, kind: str, label: str, targets, work: Path, progress) -> list[Cell]:
    from converter.port import PortRequest, PortSession
    from converter.port.loading import load_stage
    from converter.verify.spec import VerifySpec

    path = work / f"{entry.name}{_SUFFIX[kind]}"
    cells: list[Cell] = []
    start = time.perf_counter()
    try:
        import numpy as np

        model = build(entry)
        _save(entry, model, kind, path)
        request = PortRequest.from_flags(str(path), input_shapes={"": entry.shape})
        original, normalized = load_stage(request.source, True)
        x = np.random.default_rng(SEED).standard_normal(entry.shape).astype(np.float32)
        inputs = work / f"{entry.name}.inputs.npz"
        np.savez(inputs, **{normalized.graph.input[0].name: x})
        noise = noise_floor(model, x)
        atol = max(1e-4, NOISE_FACTOR * noise)
        noise16 = noise_floor(model, x, "float16") if any(t in FP16_TARGETS for t in targets) else None
    except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not stop
        line = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        return [Cell(label, entry.family, t, h, "error", f"load: {line}", time.perf_counter() - start)
                for t, h in targets]
    load_seconds = time.perf_counter() - start
    progress(f"  {label}: saved + loaded in {load_seconds:.1f} s "
             f"({len(normalized.graph.node)} nodes after normalize; float32 noise {noise:.1e}, atol {atol:.1e}"
             + (f"; float16 noise {noise16:.1e})" if noise16 is not None else ")"))
    session = PortSession.with_models(request, original, normalized, load_seconds)
    for target, hw in targets:
        start = time.perf_counter()
        atol_t, rtol_t = tolerance_for(target, hw, atol, noise16)
        try:
            result = session.port_pair(target, hw, work / label.replace("/", "-") / f"{target}-{hw}",
                                       verify=VerifySpec(inputs=str(inputs), atol=atol_t, rtol=rtol_t))
            verdict, detail, oracle = classify(result)
        except Exception as err:  # noqa: BLE001
            text = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
            verdict, detail, oracle = "error", f"{type(err).__name__}: {text}", ""
            if "EDGECONV_DEBUG" in __import__("os").environ:
                traceback.print_exc()
        cell = Cell(label, entry.family, target, hw, verdict, detail, time.perf_counter() - start, oracle, atol_t)
        progress(f"    {target:6} {hw:6} {verdict:10} {cell.seconds:6.1f} s  {detail[:110]}")
        cells.append(cell)
    return cells


def parse_targets(text: str):
    """``cpu``, ``accel``, ``all``, a framework (its CPU and accelerator) or ``fw:hw``, comma-separated."""
    groups = {"cpu": list(CPU_TARGETS), "accel": list(ACCEL_TARGETS), "accelerator": list(ACCEL_TARGETS),
              "all": list(CPU_TARGETS + ACCEL_TARGETS)}
    out = []
    for item in text.split(","):
        fw, _, hw = item.partition(":")
        if item in groups:
            picked = groups[item]
        elif not hw:
            picked = [t for t in CPU_TARGETS + ACCEL_TARGETS if t[0] == fw]
        else:
            picked = [(fw, hw)]
        out += [t for t in picked if t not in out]
    return out


def table(cells: list[Cell], targets) -> str:
    """A markdown table: one row per model, one column per framework:hardware."""
    cols = [f"{t}:{h}" for t, h in targets]
    by = {(c.model, f"{c.target}:{c.hw}"): c for c in cells}
    models = list(dict.fromkeys(c.model for c in cells))
    lines = ["| model | family | " + " | ".join(cols) + " |", "| --- | --- |" + " --- |" * len(cols)]
    for m in models:
        family = next(c.family for c in cells if c.model == m)
        row = []
        for col in cols:
            c = by.get((m, col))
            fp16 = c is not None and (c.target, c.hw) in FP16_TARGETS
            row.append("" if c is None else f"{c.verdict} {c.seconds:.1f}s" + (f" (atol {c.atol:.2g})" if fp16 else ""))
        lines.append(f"| {m} | {family} | " + " | ".join(row) + " |")
    cpu = [c for c in cells if (c.target, c.hw) in CPU_TARGETS]
    acc = [c for c in cells if (c.target, c.hw) in ACCEL_TARGETS]
    summary = []
    for label, group in (("CPU", cpu), ("accelerator", acc)):
        if group:
            counts = {v: sum(c.verdict == v for c in group) for v in
                      ("pass", "wrong", "refused", "custom", "unverified", "error")}
            summary.append(f"{label}: {counts['pass']}/{len(group)} pass ({100 * counts['pass'] / len(group):.0f}%); "
                           + ", ".join(f"{k} {v}" for k, v in counts.items() if k != "pass" and v))
    oracles: dict[str, int] = {}
    for c in cells:
        if c.verdict in ("pass", "wrong"):
            oracles[c.oracle or "?"] = oracles.get(c.oracle or "?", 0) + 1
    summary.append("judged by: " + ", ".join(f"{k} {v}" for k, v in sorted(oracles.items())))
    notes = [f"- {c.model} on {c.target}:{c.hw}: {c.verdict}: {c.detail}" for c in cells
             if c.verdict != "pass" and c.detail]
    return "\n".join(lines + [""] + summary + ([""] + notes if notes else []))


#: Where the real runtimes live relative to the checkout (tests use the same place).
DEFAULT_RUNTIMES = ROOT.parent / "shared" / "runtimes"


def use_runtimes(directory: str) -> dict[str, str]:
    """Point the TNN and MACE runtime variables at ``directory``'s tools (unless already set);
    returns the ones in effect."""
    base = Path(directory) if directory else DEFAULT_RUNTIMES
    tools = {"EDGECONV_TNN_RUNTIME": base / "tnn" / "bin" / "tnn_run",
             "EDGECONV_MACE_RUNTIME": base / "mace" / "bin" / "mace_run"}
    for var, tool in tools.items():
        if not os.environ.get(var) and tool.is_file():
            os.environ[var] = str(tool)
    return {var: os.environ[var] for var in tools if os.environ.get(var)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: all); --list shows them")
    ap.add_argument("--targets", default="all", help="cpu | accel | all | tflite,tnn:x86,...")
    ap.add_argument("--out", default="", help="keep the ported files here (default: a temp dir)")
    ap.add_argument("--json", default="", help="write the cells as JSON")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--sources", default="",
                    help="which saved forms to port: torchscript, pt2 (torch.export), onnx (torch's default "
                         f"dynamo export); default: all three for the {TRANSFORMER_SET} set, torchscript for the others")
    ap.add_argument("--runtimes", default="", help="directory with tnn/bin/tnn_run and mace/bin/mace_run "
                    f"(default: {DEFAULT_RUNTIMES} when it exists)")
    ap.add_argument("--table-from", default="", help="print the table of saved --json files (comma-separated; "
                    "later files replace earlier cells of the same model and target)")
    args = ap.parse_args()
    if args.table_from:
        merged: dict[tuple, Cell] = {}
        for path in args.table_from.split(","):
            for c in json.loads(Path(path).read_text()):
                cell = Cell(**c)
                merged[(cell.model, cell.target, cell.hw)] = cell
        order = {e.name: i for i, e in enumerate(ENTRIES)}
        cells = sorted(merged.values(), key=lambda c: order.get(c.model.split("/")[0], len(order)))
        present = {(c.target, c.hw) for c in cells}
        print(table(cells, [t for t in CPU_TARGETS + ACCEL_TARGETS if t in present]))
        return
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # constant folding's optimizer notices
    zt = transformer_entries()
    if args.list:
        for e in ENTRIES:
            print(f"{e.name:20} {e.family:15} {'x'.join(map(str, e.shape))}")
        for t in zt.TRANSFORMERS:
            print(f"{t.name:20} {t.family:15} " + ", ".join(f"{n} {'x'.join(map(str, s))} {d}" for n, s, d, _ in t.inputs))
        return
    names = [n for n in args.models.split(",") if n] or [e.name for e in ENTRIES]
    if TRANSFORMER_SET in names:
        names = [n for n in names if n != TRANSFORMER_SET] + [t.name for t in zt.TRANSFORMERS]
    unknown = [n for n in names if n not in BY_NAME and n not in zt.BY_NAME]
    if unknown:
        sys.exit(f"real_zoo: unknown model(s) {', '.join(unknown)}; --list shows the names")
    targets = parse_targets(args.targets)
    for var, tool in use_runtimes(args.runtimes).items():
        print(f"{var}={tool}")
    cells: list[Cell] = []
    begin = time.perf_counter()
    from converter.infra.fsutil import mark_temp, remove_stale

    # a run killed with SIGKILL cannot remove its directory (traced models, GBs): the next run does
    remove_stale(Path(tempfile.gettempdir()), "real-zoo-")
    with tempfile.TemporaryDirectory(prefix=f"real-zoo-{os.getpid()}-") as tmp:
        mark_temp(Path(tmp))  # what lets a later run's remove_stale prove it ours once this one is killed
        work = Path(args.out) if args.out else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in names:
            if name in zt.BY_NAME:
                cells += zt.port_entry(zt.BY_NAME[name], targets, work, lambda s: print(s, flush=True),
                                       [s for s in args.sources.split(",") if s] or zt.SOURCES)
                continue
            cells += port_model(BY_NAME[name], targets, work, progress=lambda s: print(s, flush=True),
                                sources=[s for s in args.sources.split(",") if s] or ["torchscript"])
            if not args.out:  # a model's ported files (up to GBs for ViT-B) are not kept: free them now
                for leftover in work.glob(f"{name}*"):
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
            if args.json:  # after every model: a long run stopped midway keeps what it measured
                Path(args.json).write_text(json.dumps([asdict(c) for c in cells], indent=1))
    print()
    print(table(cells, targets))
    print(f"\n{len(names)} models x {len(targets)} targets in {time.perf_counter() - begin:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(c) for c in cells], indent=1))


if __name__ == "__main__":
    main()
