"""How long one run of an exported ``.tflite`` file takes in LiteRT on this host: the
per-target table of a quantized port (:mod:`converter.quantize.per_target`) shows it.

One interpreter thread (the number does not depend on how many cores other work leaves free),
:data:`WARMUP` runs first (allocation, caches), then up to :data:`RUNS` timed runs of one sample,
fewer once :data:`BUDGET_S` seconds are spent (a large model stays cheap to port); the median.
A wall-clock number of this host, never compared in a test: benchmarks compare files.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..base import Artifact

WARMUP = 2
RUNS = 20
#: Timed runs stop once this much wall time is spent (at least :data:`MIN_RUNS` run).
BUDGET_S = 2.0
MIN_RUNS = 3


def litert_latency(artifact: Artifact, inputs: dict[str, np.ndarray], oracle: str) -> dict:
    """``{"median_ms", "runs", "threads", "runtime"}`` of ``artifact`` on ``inputs`` (ONNX layout)."""
    from ai_edge_litert.interpreter import Interpreter

    from ...infra.fsutil import quiet_native_stderr
    from .interface import feed_inputs

    path = next(p for p in artifact.files if str(p).endswith(".tflite"))
    with quiet_native_stderr():  # LiteRT prints "INFO: Created ... delegate" from C++
        interpreter = Interpreter(model_path=str(path), num_threads=1)
        interpreter.allocate_tensors()
    feed_inputs(interpreter, artifact, inputs)
    for _ in range(WARMUP):
        interpreter.invoke()
    times: list[float] = []
    spent = 0.0
    while len(times) < RUNS and (len(times) < MIN_RUNS or spent < BUDGET_S):
        start = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return {"median_ms": round(statistics.median(times) * 1e3, 3), "runs": len(times), "threads": 1,
            "runtime": f"{oracle}, CPU, 1 thread"}
