"""A custom-layer node (remedy 4) for CoreML: ML Programs cannot carry custom layers at all, so the
scaffold offers the composite MIL op where one exists and the NeuralNetwork custom layer
otherwise (``templates/coreml_*.j2``); the port ends ``unsupported`` (``Target.custom_layers``)."""

from __future__ import annotations

from pathlib import Path

REGISTRATION = ("See `coreml/README.md`: ML Programs have no custom layers; use the composite op if "
                "there is one, else the NeuralNetwork custom layer (`{name}CustomLayer.swift`).")

_COMPOSITES = {
    "GridSample": ("coreml_composite_gridsample.py.j2",
                   "GridSample maps to one MIL `resample` op (iOS 15+), as coremltools' torch frontend does."),
    "Einsum": ("coreml_composite_einsum.py.j2",
               "MIL `einsum` covers only `nchw,nwhu->nchu`-style two-operand equations; other equations have none."),
}


def scaffold_files(ops, name: str) -> dict[str, bytes]:
    """The composite op (if MIL has one) and the NeuralNetwork custom layer of one op type."""
    from ...custom.scaffold import render

    op = ops[0]
    here = Path(__file__).with_name("templates")
    composite = _COMPOSITES.get(op.op) if not op.domain else None
    note = composite[1] if composite else (f"MIL has no op for {op.qualified}; an ML Program cannot "
                                           "carry it at all, so CoreML needs the NeuralNetwork custom layer.")
    files = {
        "coreml/README.md": render("coreml_README.md.j2", here, op=op, name=name, composite=bool(composite),
                                   composite_note=note).encode(),
        f"coreml/{name}CustomLayer.swift": render("coreml_layer.swift.j2", here, op=op, name=name).encode(),
        f"coreml/{name}Bridge.mm": render("coreml_bridge.mm.j2", here, op=op, name=name).encode(),
    }
    if composite:
        files[f"coreml/{op.slug}_mil.py"] = render(composite[0], here, op=op).encode()
    return files
