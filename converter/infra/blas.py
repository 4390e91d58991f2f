"""numpy without its BLAS thread pool, for processes that multiply no big matrices.

numpy's OpenBLAS starts one worker thread per core when numpy is imported; on the 2-core CI
machine that is ~0.06 s of wall and CPU time (thread start-up and spinning) of a 0.3 s
``port --no-verify``, which runs no model: its numpy work is copying, transposing and folding
weights, never a product big enough for a second thread.  ``OPENBLAS_NUM_THREADS=1`` is only set
while numpy loads (OpenBLAS reads it then) and removed again, so child processes (a torch
loader) start with the user's environment; a value the user set is kept.

A port whose model loads in a child process (torch, TensorFlow) imports numpy the same way even
when it verifies: a process with OpenBLAS's workers has threads and must start a fresh
interpreter for the child (``isolate._single_threaded``), one that forks starts loading ~0.2-0.4 s
sooner.  Once the child is started, :func:`use_all_cores` gives OpenBLAS its usual thread count
back for the verification's matrix products (threadpoolctl, the field's tool for it).
"""

from __future__ import annotations

import os
import sys

#: Whether this process imported numpy with a one-thread BLAS (:func:`use_all_cores` undoes it).
_limited = {"threads": False}

#: What OpenBLAS reads for its thread count (the first one set wins).
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def import_numpy_single_threaded() -> None:
    """Import numpy with a one-thread BLAS unless numpy is already loaded or the user chose."""
    if "numpy" in sys.modules or any(name in os.environ for name in _THREAD_VARIABLES):
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    _limited["threads"] = True


def use_all_cores() -> None:
    """One BLAS thread per usable core again, as numpy starts by default (no-op unless
    :func:`import_numpy_single_threaded` limited it)."""
    if not _limited["threads"]:
        return
    _limited["threads"] = False
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                      user_api="blas")
