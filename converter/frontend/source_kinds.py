"""The model files edgeconv reads, by kind (no heavy imports: the CLI asks before numpy loads)."""

from __future__ import annotations

import os
from pathlib import Path

ONNX_SUFFIXES = {".onnx"}
TORCHSCRIPT_SUFFIXES = {".pt", ".pth", ".ts", ".torchscript"}
EXPORTED_PROGRAM_SUFFIXES = {".pt2"}
TF_SUFFIXES = {".pb", ".tflite", ".keras", ".h5"}
SUPPORTED = ".onnx, .pt (TorchScript), .pt2 (ExportedProgram), .pb, .tflite, .keras, .h5 or a SavedModel directory"


def loads_in_child(path: str | os.PathLike) -> bool:
    """Whether ``load.load_model`` runs user code or a converter for ``path`` in a child process
    (torch and TensorFlow sources, a SavedModel directory)."""
    path = Path(path)
    if path.is_dir():
        return True
    return path.suffix.lower() in TORCHSCRIPT_SUFFIXES | EXPORTED_PROGRAM_SUFFIXES | TF_SUFFIXES
