"""The one interface every target implements, and the values it exchanges with the pipeline.

A target is a :class:`Target` subclass instance, found by name through
:func:`converter.targets.get` (a built-in package's ``TARGET``, or one registered with
:func:`converter.targets.register`).  It has:

* ``name`` — the framework name users type (``"tnn"``); ``title`` — how messages name it (``"TNN"``),
* ``hardware`` — the matrix columns it can export for (``("arm", "x86", ...)``), and
  ``default_hw`` — the one ``--hw`` defaults to (the framework's CPU),
* ``custom_layers`` — whether its format can carry custom layers (remedy 4); CoreML ML Programs
  cannot, and the pipeline refuses such a port before exporting,
* ``ops`` — its :class:`~converter.targets.registry.OpRegistry` (loaded from ``ops_module``),
* ``export(model, out_dir, hw, options) -> Artifact`` — write real files for a *legalized*,
  normalized ONNX model (opset ``converter.ir.graph.CANONICAL_OPSET``), deterministically; an
  ``hw`` outside ``hardware`` is :class:`~converter.errors.BadInput` (:meth:`Target.check_hw`),
  a node the format cannot express is :class:`~converter.errors.Unsupported`,
* ``run(artifact, inputs) -> dict[str, np.ndarray]`` — execute the written files on the
  framework's real runtime, or on the independent reference executor where the runtime cannot
  be installed here; raise :class:`~converter.errors.RuntimeUnavailable` if neither exists.

Optionally (a target may leave it out; :func:`supports_intermediates` tells):

* ``intermediates(artifact, inputs) -> Intermediates`` — run the written files like ``run`` does
  and return the value of every tensor the file materializes, keyed by the *legalized ONNX tensor
  name* it computes, converted back to ONNX layout and dtype, with the target layer that computed
  it (``Intermediates.layer_types`` etc.).  Verification uses it to name the first layer where
  the target departs from the legalized ONNX (``converter/verify/target_layers.py``).  The map
  from file tensors to ONNX tensors is recorded at export time in ``artifact.meta``.

Exporters map ONNX ops through one :class:`~converter.targets.registry.OpRegistry` each, walked by
the shared :func:`converter.targets.driver.lower_nodes`.  Adding a target means one new package
(a ``Target`` subclass and its registry) and one ``targets.register(name, ...)`` call (the four
built-ins are listed in ``converter/targets/__init__.py``); ``tests/test_target_contract.py``
checks every registered target against this contract.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ..errors import BadInput


#: How a file whose runtime computes in half precision is judged (``Artifact.meta
#: ["suggested_tolerance"]``, used when the user gives no tolerances): CoreML on the Neural
#: Engine, TNN on OpenCL/Metal GPUs.
FP16_TOLERANCE = {"atol": 4e-3, "rtol": 4e-3}


@dataclass(frozen=True)
class ExportOptions:
    """What an exporter is told besides the model: the user's choices (``--fp16-weights``,
    ``--keep-nchw-io``) and what the port learnt on the way (the file name, the nodes that fall
    back to the CPU, the quantization to write)."""

    #: Store weights as float16 (``--fp16-weights``, ``--quantize fp16``).
    fp16_weights: bool = False
    #: TFLite: keep NCHW model inputs/outputs (a Transpose at each end) instead of NHWC ones.
    keep_nchw_io: bool = False
    #: The files' stem (sanitized by each target); None: the ONNX graph name, else "model".
    name: str | None = None
    #: Nodes the plan leaves to the runtime's CPU fallback (``converter.legalize.partition``).
    fallback_nodes: tuple[str, ...] = ()
    #: SHA-256 of the user's model file, which the files then name (CoreML's metadata); None:
    #: the exporter hashes the ONNX it was given.
    source_sha256: str | None = None
    #: The native integer export: ``{"mode", "params", "full_integer"}``
    #: (:meth:`converter.quantize.port.QuantResult.export_spec`); None: a float file.
    quantization: dict[str, Any] | None = None
    #: TFLite: the interpreter threads ``run`` uses (None: LiteRT's default).
    num_threads: int | None = None
    #: CoreML: "fp16" or "fp32" compute precision instead of the hardware's default.
    compute_precision: str | None = None


@dataclass
class Artifact:
    target: str
    hw: str
    #: Every file written, relative paths resolved against ``out_dir``.
    files: list[Path]
    out_dir: Path
    #: Names/shapes/layouts of the exported interface and anything ``run`` needs.
    meta: dict[str, Any] = field(default_factory=dict)
    #: Which executor ``run`` uses: "litert", "onnxruntime-roundtrip", "mil-numpy", "coreml", ...
    runtime: str = ""


class Intermediates(dict):
    """ONNX tensor name -> value of that tensor as the target computed it (ONNX layout/dtype).

    Tensors a target fuses away (e.g. a convolution's output when the file has CONV_2D with a
    fused ReLU) are simply absent.  For each key the side tables say who computed it.
    """

    def __init__(self, target: str, layer_count: int = 0):
        super().__init__()
        self.target = target
        #: Layers/ops in the file (for the report's "candidate nodes").
        self.layer_count = layer_count
        #: ONNX tensor -> the target's layer/op type ("CONV_2D", "Convolution", "Conv2D", "conv").
        self.layer_types: dict[str, str] = {}
        #: ONNX tensor -> the layer's name in the file ("op 5" where ops have no names).
        self.layer_names: dict[str, str] = {}
        #: ONNX tensor -> the tensor/blob/var name in the file.
        self.target_tensors: dict[str, str] = {}

    def add(self, onnx_name: str, value: np.ndarray, layer_type: str, layer_name: str, target_tensor: str,
            dtype: str | None = None) -> None:
        """Record ``value``; the first record of a tensor wins (the op that computed it, not a
        later copy/cast of it).  ``dtype``: the ONNX dtype to hand it back in."""
        if onnx_name in self:
            return
        value = np.asarray(value)
        try:
            self[onnx_name] = value.astype(np.dtype(dtype), copy=False) if dtype else value
        except TypeError:  # a dtype numpy does not know (bfloat16, ...): keep the target's
            self[onnx_name] = value
        self.layer_types[onnx_name] = layer_type
        self.layer_names[onnx_name] = layer_name
        self.target_tensors[onnx_name] = target_tensor


def supports_intermediates(target) -> bool:
    """Does ``target`` implement the optional ``intermediates`` method?"""
    return callable(getattr(target, "intermediates", None))


class Target(ABC):
    """Base of every target: subclass it, set the attributes, implement ``export`` and ``run``."""

    name: str
    #: The framework's name in messages ("TFLite", "TNN", "MACE", "CoreML").
    title: str
    hardware: tuple[str, ...]
    #: What ``--hw`` defaults to: the framework's CPU (one of ``hardware``).
    default_hw: str
    custom_layers: bool = True
    #: ``--quantize`` modes the exporter writes natively (other modes keep the QDQ model only);
    #: "fp16" means float16 weights (``ExportOptions.fp16_weights``).
    quantized_modes: tuple[str, ...] = ()
    #: What ``run`` executes its files with on this machine (``Artifact.runtime``): "litert",
    #: "tnn-reader+onnxruntime", ... (:meth:`executor_oracle` names it).
    executor: str = ""
    #: The environment variable naming this framework's real runtime (``--runtime NAME=PATH``
    #: overrides it; :mod:`converter.targets.oracles`); None: no pluggable runtime.
    runtime_env: str | None = None
    #: The module whose import fills the target's op registry (its ``OPS``); None for a target
    #: that does not map ONNX ops one by one.
    ops_module: str | None = None

    @property
    def ops(self):
        """The target's :class:`~converter.targets.registry.OpRegistry`, with every family loaded."""
        return None if self.ops_module is None else importlib.import_module(self.ops_module).OPS

    def keeps_float_layers(self, mode: str) -> bool:
        """Whether its ``mode`` file may leave layers in float among the integer ones (what
        ``--quantize auto``'s "keep float" remedy needs)."""
        return True

    def carries_qdq_weight_integers(self, per_channel: bool) -> bool:
        """Whether its int8/uint8 file holds the QDQ model's weight integers (for this weight
        granularity), not a weight scheme of its own: then the bias correction computed for
        those integers (converter/quantize/bias_correction.py) holds for the file too."""
        return False

    def weight_integers(self, mode: str, hw: str):
        """How its ``mode`` file for ``hw`` quantizes a Conv weight when it does so itself, not
        with the QDQ model's integers: ``(float weight) -> (integers, scale, zero point)`` per
        tensor, or None.  The port writes these integers into the QDQ model
        (converter/quantize/target_weights.py), so that its verdict and the bias correction
        compute with the file's weights."""
        return None

    def executor_name(self) -> str:
        """``executor``, for targets whose executor depends on the machine (CoreML: the device
        runtime on macOS, the MIL executor elsewhere)."""
        return self.executor

    @property
    def executors(self) -> tuple[str, ...]:
        """Every executor name ``run`` may use (on any machine)."""
        return (self.executor,) if self.executor else ()

    def executor_oracle(self, executor: str):
        """The :class:`~converter.runtimes.base.Oracle` of a built-in executor (default: a reader
        of that name)."""
        from ..runtimes.base import READER, Oracle

        return Oracle(executor or "unknown executor", READER)

    def load_runtime(self, path: Path):
        """The :class:`~converter.runtimes.base.RealRuntime` adapter for the tool at ``path``
        (BadInput when it is not one); only targets with a ``runtime_env``."""
        raise BadInput(f"no pluggable runtime for '{self.name}'")

    # ------------------------------------------------------------- custom layers (remedy 4)
    #: The module holding ``scaffold_files(ops, name)`` and ``REGISTRATION`` (the scaffold's
    #: wrapper files around the shared kernel and how an app registers them); None: no scaffold.
    custom_module: str | None = None

    def custom_layer_name(self, op) -> str:
        """The type string a custom op gets in this framework's file."""
        return op.symbol

    def custom_layer_files(self, ops, name: str) -> dict[str, bytes]:
        """``{relative path: bytes}``: this framework's wrapper files for one custom op type."""
        return self._custom().scaffold_files(ops, name)

    def custom_layer_registration(self, op, name: str) -> str:
        """How an app registers the generated layer (one paragraph of the scaffold's README)."""
        return self._custom().REGISTRATION.format(op=op.slug, name=name, symbol=op.symbol, upper=name.upper())

    def _custom(self):
        if self.custom_module is None:
            raise BadInput(f"no custom-layer scaffold for {self.title}")
        return importlib.import_module(self.custom_module)

    def check_hw(self, hw: str) -> None:
        """BadInput unless ``hw`` is one of the target's hardware names."""
        if hw not in self.hardware:
            raise BadInput(f"unknown {self.title} hardware '{hw}'; choose one of: {', '.join(self.hardware)}")

    def preload(self) -> None:
        """Import now the heavy modules ``export`` and ``run`` will import.  The pipeline calls it
        while a child process loads a torch model, so that the import overlaps that work instead
        of following it; a failure here is ignored (``export`` reports it).  Default: nothing."""
        return None

    def latency(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict | None:
        """The median time of one run of ``artifact`` on ``inputs`` in the framework's own runtime
        on this host (``{"median_ms", "runs", "threads", "runtime"}``), or None: not measured here
        (a reader's time is not the framework's)."""
        return None

    @abstractmethod
    def export(self, model: onnx.ModelProto, out_dir: Path, hw: str,
               options: ExportOptions | None = None) -> Artifact: ...

    @abstractmethod
    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
