"""What a command reads -- the model and the support matrix -- as typed values, not loose flags.

:class:`ModelSource` is what ``edgeconv port MODEL -s ... --trust-pickle --timeout ...``, a batch
manifest entry and the Python API all turn into.  It loads (:meth:`ModelSource.load`) and
normalizes (:meth:`ModelSource.normalized`); :mod:`converter.port` holds the port's own loading
(weights held once, imports overlapped with a child's load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import BadInput
from .declared_inputs import check_declared, parse_input_flags


@dataclass(frozen=True)
class ModelSource:
    """A model file (or, for the Python API, an in-memory model) and how to read it."""

    #: A path (``.onnx``, ``.pt2``, ``.pt``, ``.pb``, ``.tflite``, ``.keras``, a SavedModel
    #: directory) or an ``onnx.ModelProto``.
    model: Any
    #: Fixed input shapes by input name; ``""`` names the first input.
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: Allow code inside the model file (pickles, Keras Lambda layers, TF PyFunc ops).
    trust_pickle: bool = False
    #: Seconds user model code (and each inference) may run; 0 = no limit, None = the default.
    timeout: float | None = None
    #: Refuse models whose reference inference needs more bytes (None: half the machine's RAM).
    max_memory: int | None = None
    #: For an in-memory torch module: the example inputs it is exported with.
    example_inputs: tuple | None = None
    #: Input element types by input name (``-s ids=1x128:int64``; ``""`` names the first input):
    #: what a TorchScript file is traced with (default float32); files carrying their own types
    #: must agree (:mod:`converter.frontend.declared_inputs`).
    input_dtypes: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> str | None:
        """The file's path, or None for an in-memory model."""
        import os

        return str(self.model) if isinstance(self.model, (str, os.PathLike)) else None

    @classmethod
    def from_flags(cls, model, input_shape: list[str] | None = None, trust_pickle: bool = False,
                   timeout: float | None = None, max_memory: int | str | None = None) -> ModelSource:
        """From the command line's spelling: ``-s name=1x3x224x224`` / ``-s ids=1x128:int64`` flags,
        ``--max-memory 8G``."""
        if isinstance(max_memory, str):
            from ..ir.memory import parse_size

            max_memory = parse_size(max_memory)
        shapes, dtypes = parse_input_flags(input_shape)
        return cls(model, shapes, trust_pickle, timeout, max_memory, input_dtypes=dtypes)

    def load(self, meanwhile=(), store=None, sha256: bool = False):
        """The model as ONNX, as read (not normalized)."""
        import onnx

        if isinstance(self.model, onnx.ModelProto):
            check_declared(self.model, self.input_dtypes, {}, "the model")
            return self.model
        if self.example_inputs is not None or _is_torch_module(self.model):
            if self.example_inputs is None:
                raise BadInput(f"a torch module ({type(self.model).__name__}) needs example_inputs to be traced with")
            from .torch_module import load_module

            model = load_module(self.model, self.example_inputs, self.timeout, meanwhile)
            check_declared(model, self.input_dtypes, {}, f"the {type(self.model).__name__} module")
            return model
        if self.path is None:
            raise BadInput(f"cannot read a {type(self.model).__name__}: give a model file's path or an "
                           "onnx.ModelProto")
        from .load import load_model

        model = load_model(self.model, dict(self.input_shapes), self.trust_pickle, self.timeout, meanwhile,
                           store=store, sha256=sha256, input_dtypes=dict(self.input_dtypes))
        check_declared(model, self.input_dtypes, {}, self.path)
        return model

    def shapes_for(self, model) -> dict[str, tuple[int, ...]]:
        """The input shapes keyed by ``model``'s input names (a bare shape names the first)."""
        shapes = dict(self.input_shapes)
        if "" in shapes:
            shapes[model.graph.input[0].name] = shapes.pop("")
        return shapes

    def normalized(self, require_static: bool = True):
        """Load and normalize: the first two stages of every command."""
        from .normalize import dynamic_inputs, normalize

        model = self.load()
        shapes = self.shapes_for(model)
        normalized = normalize(model, shapes or None)
        from .prequantized import dequantize_input

        # a quantized (QDQ) model is checked and planned as its float graph, as a port reads it
        normalized = dequantize_input(normalized, str(self.path or "model"), rename=True)
        if require_static:
            problems = dynamic_inputs(normalized)
            if problems:
                raise BadInput(problems[0])
        return normalized


def _is_torch_module(model) -> bool:
    """Without importing torch: a module object exists only if torch is loaded already."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(model, torch.nn.Module)


@dataclass(frozen=True)
class MatrixSource:
    """``path`` None: the packaged matrix; ``overlays``: YAML files applied over it, in order."""

    path: str | None = None
    overlays: tuple[str, ...] = ()

    def load(self):
        from ..matrix import load_matrix

        return load_matrix(self.path, self.overlays)


def parse_shape_flags(flags: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x=1x3x224x224", "1x3x8x8"]`` -> ``{"x": (1, 3, 224, 224), "": (1, 3, 8, 8)}``.

    A shape without a name applies to the model's first input; a ``:dtype`` suffix is checked and
    left out (:func:`~converter.frontend.declared_inputs.parse_input_flags` keeps it).
    """
    return parse_input_flags(flags)[0]
