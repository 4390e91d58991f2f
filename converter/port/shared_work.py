"""Work shared by the stages and ports of one model: the reference outputs verification
compares with.

Loading and normalizing happen once (``pipeline.load_stage``); so do the reference outputs every
port's verification compares with: the original and normalized models run in onnxruntime once
per input sample, not once per target (``edgeconv port --to all``).  Ports may run in threads
(``-j``): the memoized runners lock around their first computation, and hand every port the same
(read-only) arrays.

The runs can start early (:meth:`SharedWork.prefetch`): a worker thread computes them while the
port legalizes and exports, which is Python work holding one core; onnxruntime releases the GIL
and uses the other.  Verification then finds the outputs computed.
"""

from __future__ import annotations

import hashlib
import queue
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
        self.prefetched: set[tuple] = set()  # the sample lists handed to SharedWork.prefetch

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
        from ..runtimes.onnxruntime import onnx_runner

        self.original = MemoRunner(lambda: onnx_runner(original))
        self.normalized = MemoRunner(lambda: onnx_runner(normalized))
        self._jobs: queue.SimpleQueue | None = None
        self._lock = threading.Lock()

    def reference_runners(self):
        return self.original, self.normalized

    def prefetch(self, runner: MemoRunner, samples) -> None:
        """Run ``runner`` on ``samples`` in the worker thread (jobs run one after another, so at
        most one extra onnxruntime session is alive), then free its session.  Errors are
        dropped: the stage that needs the outputs calls the runner again and reports them."""
        samples = list(samples)
        key = tuple(_sample_key(s) for s in samples)
        with self._lock:
            if key in runner.prefetched:  # the ports of one model (--to all) ask for the same ones
                return
            runner.prefetched.add(key)
            if self._jobs is None:
                self._jobs = queue.SimpleQueue()
                # A daemon: an interrupted port does not wait for a run whose outputs it drops.
                threading.Thread(target=_work, args=(self._jobs,), name="edgeconv-prefetch", daemon=True).start()
        self._jobs.put((runner, samples))


def _work(jobs: queue.SimpleQueue) -> None:
    while True:
        runner, samples = jobs.get()
        try:
            for sample in samples:
                runner(sample)
        except Exception:  # noqa: BLE001, S110 - the stage runs it again and reports the error
            pass
        finally:
            runner.release()
