"""Work shared by the ports of one model to several targets (``edgeconv port --to all``).

Loading and normalizing happen once (``pipeline.load_stage``); so do the reference outputs every
port's verification compares with: the original and normalized models run in onnxruntime once
per input sample, not once per target.  Ports may run in threads (``-j``): the memoized runners
lock around their first computation, and hand every port the same (read-only) arrays.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np


def _sample_key(inputs: dict[str, np.ndarray]) -> tuple:
    parts = []
    for name in sorted(inputs):
        array = np.ascontiguousarray(inputs[name])
        parts.append((name, array.dtype.str, array.shape, hashlib.sha1(array.tobytes()).hexdigest()))
    return tuple(parts)


class MemoRunner:
    """A stage runner computing each distinct input sample once (thread-safe)."""

    def __init__(self, make_runner):
        self._make = make_runner
        self._runner = None
        self._lock = threading.Lock()
        self._outputs: dict[tuple, dict[str, np.ndarray]] = {}
        self.computed = 0  # how many samples really ran (tests and benchmarks read it)

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = _sample_key(inputs)
        with self._lock:
            if key not in self._outputs:
                if self._runner is None:
                    self._runner = self._make()
                self._outputs[key] = self._runner(inputs)
                self.computed += 1
            return dict(self._outputs[key])

    def release(self) -> None:
        """Free the session; outputs already computed stay (other ports reuse them)."""
        with self._lock:
            release = getattr(self._runner, "release", None)
            if callable(release):
                release()


class SharedWork:
    """Reference runners for (original, normalized), shared by every port of the model."""

    def __init__(self, original, normalized):
        from .verify.runtime import onnx_runner

        self.original = MemoRunner(lambda: onnx_runner(original))
        self.normalized = MemoRunner(lambda: onnx_runner(normalized))

    def reference_runners(self):
        return self.original, self.normalized
