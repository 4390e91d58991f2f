"""Model runs over many samples, two at a time, each on one thread.

Quantizing runs the float model and its quantized candidates over tens of samples (the
calibration pass, the held-out references, each candidate's outputs, the per-layer table).
onnxruntime's own thread pool splits each node over the cores and meets at a barrier after it;
on a shared host one preempted pool thread holds up the other at every node (ResNet-18 at
224x224 on a loaded 2-core host: 0.45-0.50 s a sample with two pool threads, 0.40 s with one).
Running :data:`WORKERS` samples at once, each session single-threaded (``threads=1``), keeps
every core busy without that barrier: no slower than one thread on a loaded host, twice as fast
on an idle one.  Results come back in the samples' order, so every sum over samples is added up
in the same order on every run (deterministic files and numbers).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Samples run at once (and onnxruntime threads per session: 1).
WORKERS = max(1, min(2, _cores()))
SESSION_THREADS = 1


def ordered_map(fn: Callable, items: Iterable, workers: int = WORKERS) -> Iterator:
    """``fn(item)`` for every item, in order, at most ``workers`` computing at once (so at most
    that many results are held before the caller takes them)."""
    if workers <= 1:
        yield from (fn(item) for item in items)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="edgeconv-sample") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
