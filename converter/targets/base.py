"""The one small interface every target implements.

A target is one module under ``converter/targets/`` exposing ``TARGET``, an object with:

* ``name`` — the framework name users type (``"tnn"``),
* ``hardware`` — the matrix columns it can legalize for (``("arm", "x86", ...)``),
* ``export(model, out_dir, hw, options) -> Artifact`` — write real files for a *legalized*,
  normalized ONNX model (opset ``converter.graph.CANONICAL_OPSET``), deterministically,
* ``run(artifact, inputs) -> dict[str, np.ndarray]`` — execute the written files on the
  framework's real runtime, or on the independent reference executor where the runtime cannot
  be installed here; raise :class:`~converter.errors.RuntimeUnavailable` if neither exists.

Adding a target means adding a module and one line in ``converter/targets/__init__.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx


@dataclass
class ExportOptions:
    fp16_weights: bool = False
    #: TFLite: keep NCHW model inputs/outputs (a Transpose at each end) instead of NHWC ones.
    keep_nchw_io: bool = False
    #: Free-form per-target options (documented by each target).
    extra: dict[str, Any] = field(default_factory=dict)


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


class Target(Protocol):
    name: str
    hardware: tuple[str, ...]

    def export(
        self, model: onnx.ModelProto, out_dir: Path, hw: str, options: ExportOptions | None = None
    ) -> Artifact: ...

    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
