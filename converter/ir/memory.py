"""How much memory running a model on seeded inputs takes, estimated before anything runs.

``-s 1x3x99999x99999`` (or a model declaring such dims) made reference inference allocate
hundreds of GiB and die with an internal MemoryError.  Every tensor whose shape shape inference
knows is counted once (a generous upper bound: onnxruntime reuses buffers), plus the float64
copies verification makes of the inputs and outputs; above ``--max-memory`` the command refuses
with exit 2 and the estimate before it writes or allocates anything.
"""

from __future__ import annotations

import os
import re

from ..errors import BadInput

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """``8G``, ``512MiB``, ``1.5g``, ``1073741824`` -> bytes."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise BadInput(f"--max-memory '{text}': expected a size such as 8G, 512M or 1073741824")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise BadInput(f"--max-memory '{text}': must be positive")
    return value


def default_limit() -> int:
    """Half of the machine's physical memory (or 8 GiB when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def _tensor_bytes(value_info) -> tuple[int, int] | None:
    """(elements, bytes) of a value_info with a fully known shape."""
    import numpy as np
    import onnx

    t = value_info.type.tensor_type
    if not t.elem_type or not t.HasField("shape"):
        return None
    elements = 1
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        elements *= d.dim_value
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
    except Exception:  # noqa: BLE001 - string or unknown types
        itemsize = 8
    return elements, elements * itemsize


def inference_bytes(model) -> tuple[int, str]:
    """(estimated bytes, the biggest tensor as ``'name' 1x3x224x224 float32``)."""
    graph = model.graph
    from .weights import tensor_bytes

    total = sum(tensor_bytes(t) for t in graph.initializer)
    seen, biggest, biggest_bytes = set(), "", 0
    interface = {v.name for v in list(graph.input) + list(graph.output)}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.name in seen:
            continue
        seen.add(vi.name)
        size = _tensor_bytes(vi)
        if size is None:
            continue
        elements, nbytes = size
        # Verification keeps float64 copies of inputs and outputs for its metrics.
        total += nbytes + (elements * 8 * 2 if vi.name in interface else 0)
        if nbytes > biggest_bytes:
            dims = "x".join(str(d.dim_value) for d in vi.type.tensor_type.shape.dim) or "scalar"
            biggest, biggest_bytes = f"'{vi.name}' {dims} ({format_size(nbytes)})", nbytes
    return total, biggest


def check_memory(model, limit: int | None, what: str = "reference inference") -> int:
    """Raise BadInput when running ``model`` would need more than ``limit`` bytes."""
    limit = default_limit() if limit is None else limit
    needed, biggest = inference_bytes(model)
    if needed > limit:
        raise BadInput(f"{what} would need about {format_size(needed)} of memory (largest tensor {biggest}), "
                       f"more than --max-memory {format_size(limit)}; give smaller --input-shape values or "
                       "raise --max-memory")
    return needed


#: Weights at least this big make a stage free the copies it dropped right away (a full cycle
#: collection costs tens of milliseconds in a big process: not worth it for small models).
RELEASE_MIN_BYTES = 64 << 20


def weight_bytes(model) -> int:
    """Bytes of the model's initializers held in memory (or by reference in a weight store)."""
    from .weights import tensor_bytes

    return sum(tensor_bytes(t) for t in model.graph.initializer)


#: Bytes per element of the tensor types whose ``raw_data`` is one fixed-size value per element
#: (onnx.TensorProto.DataType; not strings, not the packed 4-bit types).


def release(heavy: bool) -> None:
    """Free what graphsurgeon graphs (cyclic: only the cycle collector frees them) and the weight
    copies they hold left behind, when ``heavy`` (the model's weights >= RELEASE_MIN_BYTES)."""
    if heavy:
        import gc

        gc.collect()
