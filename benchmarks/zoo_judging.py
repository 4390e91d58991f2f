"""What benchmarks/real_zoo.py and its transformer set (zoo_transformers.py) share: importing
torchvision against the CPU torch, seeded BatchNorm statistics, the float32 noise floor the
tolerances are built on, and a port's cell in the table.  Both import it; neither imports the
other back (real_zoo loads zoo_transformers, never the reverse)."""

from __future__ import annotations

import sys
from dataclasses import dataclass


def import_torchvision():
    """torchvision, importable against the CPU build of torch.

    PyPI's Linux torchvision 0.28.0 wheel links CUDA; against torch 2.13.0+cpu its compiled ops
    library does not load, and its import then fails registering fake kernels for two ops it
    never defined (torchvision::nms, torchvision::qnms).  Declaring those two schemas lets the
    pure-Python package import; no model here calls a compiled torchvision op (the detection
    entries below are backbone + head, without the NMS post-processing)."""
    import torch

    try:
        import torchvision  # noqa: F401
        return torchvision
    except RuntimeError as err:
        if "torchvision::nms" not in str(err):
            raise
    for name in [m for m in list(sys.modules) if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 - kept alive below
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
    import_torchvision.keep_alive = lib
    import torchvision

    return torchvision


#: Samples in the BatchNorm calibration pass.  A BatchNorm late in a small-input network sees one
#: or four positions per sample (LeViT's last stage at 64x64 is 1x1): with two samples its
#: statistics were noise, which compounds through the residual stream (LeViT's outputs reached
#: 1e14 on a fresh input); eight keep every model here within float32's range.
CALIBRATION_BATCH = 8


def randomize_batchnorm(model, shape, seed: int) -> None:
    """Seeded BatchNorm statistics and affine parameters that are neither the defaults nor
    degenerate.

    gamma and beta are drawn at random; then, in one eval-mode forward pass over a seeded random
    input, a pre-hook on each BatchNorm sets its running mean and variance from the input it
    actually receives (upstream BatchNorms already hold their final statistics), perturbed per
    channel (mean +- 0.1 sigma, variance x 0.8..1.25).  Activations stay near unit scale through
    a hundred random layers, so float32 tolerances stay meaningful, while a converter that ignores
    or misfolds any of the four BN tensors shows up as wrong numbers."""
    import torch

    g = torch.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    done: set[int] = set()

    def calibrate(module, inputs):
        if id(module) in done:
            return
        done.add(id(module))
        x = inputs[0].transpose(0, 1).reshape(inputs[0].shape[1], -1)
        mean, var = x.mean(1), x.var(1) + 1e-3
        module.running_mean.copy_(mean + 0.1 * var.sqrt() * torch.randn(mean.shape, generator=g))
        module.running_var.copy_(var * torch.empty(var.shape).uniform_(0.8, 1.25, generator=g))

    model.eval()
    with torch.no_grad():
        for m in norms:
            if m.affine:
                m.weight.copy_(torch.empty(m.weight.shape).uniform_(0.5, 1.5, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
        hooks = [m.register_forward_pre_hook(calibrate) for m in norms]
        try:
            model(torch.randn((CALIBRATION_BATCH, *shape[1:]), generator=g))
        finally:
            for h in hooks:
                h.remove()


#: Float32 noise floor -> verification atol.  A float32 network differs from itself in float64
#: by a few 1e-4 at the outputs of a 50-layer random network (resnet50: 2.5e-4 on logits of
#: magnitude 12), above verify's default atol 1e-4, so every target would "fail" on rounding
#: alone.  The benchmark measures that floor on the verification inputs and allows
#: NOISE_FACTOR times it; a real conversion bug (a misfolded BatchNorm, an off-by-one pad) moves
#: outputs by 1e-2..1e0, far above.
NOISE_FACTOR = 8.0


#: Targets that compute in float16 (CoreML on the Neural Engine), judged against the float16 noise
#: floor: the eager model run in half precision vs float64 (torch's CPU half kernels; on a random
#: ResNet-18 they miss by 1.6e-2 where the CoreML float16 program misses by 8e-3), never tighter
#: than the exporter's own float16 tolerance.
FP16_TARGETS = {("coreml", "ane")}
FP16_NOISE_FACTOR = 1.0
FP16_MIN_TOL = 4e-3


def noise_floor(model, x, dtype="float32") -> float:
    """max |``dtype`` output - float64 output| of the eager model on ``x`` (inf when the model
    cannot run in that dtype on the CPU)."""
    import copy

    import torch

    def leaves(out):
        return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]

    with torch.no_grad():
        ref64 = leaves(copy.deepcopy(model).double()(torch.from_numpy(x).double()))
        if dtype == "float32":
            low = leaves(model(torch.from_numpy(x)))
        else:
            try:
                low = leaves(copy.deepcopy(model).half()(torch.from_numpy(x).half()))
            except Exception:  # noqa: BLE001 - an op without a CPU half kernel
                return float("inf")
    return max(float((a.double() - b).abs().max()) for a, b in zip(low, ref64))


def tolerance_for(target, hw, atol32: float, noise16: float) -> tuple[float, float | None]:
    """(atol, rtol) for one port; rtol None = verify's default."""
    if (target, hw) in FP16_TARGETS:
        tol = max(FP16_MIN_TOL, atol32, FP16_NOISE_FACTOR * noise16) if noise16 != float("inf") else FP16_MIN_TOL
        return tol, FP16_MIN_TOL
    return atol32, None




@dataclass
class Cell:
    model: str
    family: str
    target: str
    hw: str
    verdict: str  # pass | wrong | refused | custom | error | unverified
    detail: str
    seconds: float
    oracle: str = ""
    atol: float = 1e-4


def classify(result) -> tuple[str, str, str]:
    report = result.report
    oracle = getattr(result, "oracle", "") or report.get("oracle") or (report.get("artifact") or {}).get("runtime", "")
    custom = sorted(report.get("custom_layers") or {}) if isinstance(report.get("custom_layers"), dict) else \
        [c.get("node", "?") if isinstance(c, dict) else str(c) for c in report.get("custom_layers") or []]
    if custom:
        ops = sorted({e.get("op", "?") for e in report.get("plan", {}).get("entries", [])
                      if e.get("remedy") == "custom"})
        return "custom", f"{len(custom)} custom layer(s): {', '.join(ops) or ', '.join(custom[:4])}", oracle
    if result.status == "needs_custom":
        return "custom", result.reason[:160], oracle
    if result.status == "ok":
        verification = report.get("verification") or {}
        if verification.get("ok") is True:
            return "pass", "", oracle
        return "unverified", str(verification.get("summary", ""))[:160], oracle
    if result.status == "verify_failed":
        return "wrong", result.reason[:160], oracle
    return "refused", result.reason[:200], oracle
