"""A port's first two stages, done once per model: load and normalize, with the big weights held
once (:mod:`converter.ir.weights`) and the later stages' imports overlapped with a child's load."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

from ..errors import BadInput
from ..frontend.source import ModelSource
from ..infra.fsutil import sha256_file

#: Targets whose ports hold big weights by reference (converter/ir/weights.py): their exporter reads
#: weights through graphsurgeon only.  The others get models holding their bytes.
BY_REFERENCE_TARGETS = frozenset({"tflite"})
#: Models with at least this many bytes in big initializers (``weights.MIN_BYTES`` each) hold
#: them by reference: a ResNet-18 (45 MB) then never copies them through graphsurgeon's export
#: (0.2 s of CPU per port); for a few MB the bookkeeping is not worth it.
STORE_MIN_BYTES = 16 << 20


def preload_steps(frameworks, verify: bool) -> list:
    """What the stages after loading import, as steps to run while a child process loads a torch
    model (:func:`converter.frontend.isolate.run_models`): on two cores the imports then cost no wall time."""
    from .. import targets

    modules = ["onnx_graphsurgeon", "converter.frontend.normalize", "converter.legalize.apply",
               "converter.legalize.check"]
    if verify:
        modules += ["onnxruntime", "converter.verify"]
    steps = [functools.partial(importlib.import_module, name) for name in modules]
    return steps + [targets.get(fw).preload for fw in dict.fromkeys(frameworks)]


def load_stage(source: ModelSource, runs_models: bool, meanwhile=(), store=None):
    """Load and normalize; returns (original ONNX, normalized ONNX).  ``meanwhile``: steps to run
    while a torch model loads in its child process (:func:`preload_steps`); ``runs_models``: the
    port will run the model (verification, quantization), so its memory is checked first.

    With a :class:`~converter.ir.weights.WeightStore`, the big weights of a model with at least
    ``STORE_MIN_BYTES`` of them go into the store and both models refer to them (the caller
    keeps the store active while it uses the models: ``weights.holding(store)``)."""
    from ..frontend.normalize import dynamic_inputs, normalize
    from ..frontend.prequantized import dequantize_input, is_quantized
    from ..ir import weights

    path = source.path
    if path is not None and Path(path).is_file():  # the report's model_sha256, while a child loads
        meanwhile = [functools.partial(sha256_file, path), *meanwhile]
    original = source.load(meanwhile, store=store, sha256=True)
    if runs_models:
        from ..infra.blas import use_all_cores

        use_all_cores()  # a torch/TF load forked its child single-threaded (converter/infra/blas.py)
    if store is not None:
        if store.nbytes + weights.holdable_bytes(original) >= STORE_MIN_BYTES:
            weights.hold(original, store)  # big weights a non-ONNX source or the .onnx itself held
        else:  # small: not worth it; the models hold their bytes
            weights.materialize(original)
            store.clear()
            store = None
    shapes = source.shapes_for(original)
    with weights.holding(store):
        normalized = normalize(original, shapes or None)
        if is_quantized(normalized):  # a QDQ model: its float graph, its scales kept for quantizing
            original = dequantize_input(original, str(source.path or "model"))
            normalized = dequantize_input(normalized, str(source.path or "model"), rename=True)
    problems = dynamic_inputs(normalized)
    if problems:
        raise BadInput(problems[0])
    if runs_models:
        from ..ir.memory import check_memory

        check_memory(normalized, source.max_memory)
    return original, normalized
