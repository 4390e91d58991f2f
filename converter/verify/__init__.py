"""Numerical equivalence of a port, stage by stage, and the first layer where it breaks.

    from converter.verify import verify_stages, Stage, load_tolerances
    from converter.verify.localize import localize
    report = verify_stages(original, [Stage("legalized", onnx_runner(m), model=m)], inputs)
    report.ok, report.first_failure.layers.first   # -> the guilty layer, its op and rule

Comparators and verdicts over runners (the runners themselves, and the feeds they get, are
:mod:`converter.runtimes`).  Modules: ``metrics`` (max abs/rel, cosine,
SQNR, normalized rMSE), ``stages`` (stage comparison, tolerance profiles), ``localize`` (per-layer
rMSE across rewrites), ``target_layers`` (per-layer rMSE inside an exported file, through the
target's optional ``intermediates``), ``replay`` (inputs + reproduce command), ``report`` (table, JSON, SVG),
``pipeline`` (what ``edgeconv verify`` and ``edgeconv port`` call).
"""

_EXPORTS = {
    "load_npz": "..runtimes.feeds", "random_inputs": "..runtimes.feeds", "onnx_runner": "..runtimes.onnxruntime",
    "DEFAULT_LAYER_TOL": ".localize", "LayerReport": ".localize", "LayerResult": ".localize",
    "Metrics": ".metrics", "Tolerance": ".metrics",
    "port_stages": ".pipeline", "verify_files": ".pipeline", "verify_port": ".pipeline",
    "Stage": ".stages", "Tolerances": ".stages", "VerifyReport": ".stages", "compose": ".stages",
    "load_tolerances": ".stages", "target_runner": ".stages", "verify_stages": ".stages",
    "TargetLocalizer": ".target_layers", "localize_target": ".target_layers",
}


def __getattr__(name: str):
    # Loaded on first use: ``converter.verify.spec`` (what the CLI builds) imports nothing heavy.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LAYER_TOL", "LayerReport", "LayerResult", "Metrics", "Stage", "TargetLocalizer", "Tolerance",
    "Tolerances", "VerifyReport", "compose", "load_npz", "load_tolerances", "localize_target",
    "onnx_runner", "port_stages",
    "random_inputs", "target_runner", "verify_files", "verify_port", "verify_stages",
]
