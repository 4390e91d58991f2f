"""Numerical equivalence of a port, stage by stage, and the first layer where it breaks.

    from converter.verify import verify_stages, localize, Stage, load_tolerances
    report = verify_stages(original, [Stage("legalized", onnx_runner(m), model=m)], inputs)
    report.ok, report.first_failure.layers.first   # -> the guilty layer, its op and rule

Modules: ``inputs`` (seeded inputs, .npz calibration data), ``metrics`` (max abs/rel, cosine,
SQNR, normalized rMSE), ``stages`` (stage comparison, tolerance profiles), ``localize`` (per-layer
rMSE across rewrites), ``target_layers`` (per-layer rMSE inside an exported file, through the
target's optional ``intermediates``), ``replay`` (inputs + reproduce command), ``report`` (table, JSON, SVG),
``pipeline`` (what ``edgeconv verify`` and ``edgeconv port`` call).
"""

from .inputs import load_npz, random_inputs
from .localize import DEFAULT_LAYER_TOL, LayerReport, LayerResult, localize
from .metrics import Metrics, Tolerance
from .pipeline import port_stages, verify_files, verify_port
from .runtime import onnx_runner
from .stages import Stage, Tolerances, VerifyReport, compose, load_tolerances, target_runner, verify_stages
from .target_layers import TargetLocalizer, localize_target

__all__ = [
    "DEFAULT_LAYER_TOL", "LayerReport", "LayerResult", "Metrics", "Stage", "TargetLocalizer", "Tolerance",
    "Tolerances", "VerifyReport", "compose", "load_npz", "load_tolerances", "localize", "localize_target",
    "onnx_runner", "port_stages",
    "random_inputs", "target_runner", "verify_files", "verify_port", "verify_stages",
]
