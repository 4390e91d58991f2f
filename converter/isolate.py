"""Run user model code (TorchScript ``forward``, tracing, ``torch.onnx.export``) in a child
process with a time limit, where a signal really stops it.

A model whose ``forward`` loops forever keeps torch's C++ interpreter busy; Python signal
handlers only run between bytecodes, so SIGTERM and Ctrl-C were ignored.  Here the work runs in
a forked child; the parent waits in Python (so its handlers fire), and on timeout, SIGINT or
SIGTERM it kills the child with SIGKILL.  The child also dies with the parent
(``PR_SET_PDEATHSIG``), so ``kill -9`` of edgeconv leaves no orphan behind.

The child hands ONNX models back as files in a private temp directory; errors come back as
``(exit code, one line)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import tempfile
import time
from pathlib import Path
from typing import Callable

from .errors import EXIT_INTERNAL, BadInput, EdgeconvError, TimedOut

#: ``--timeout`` default: seconds user model code may run (load, trace, export) before it is stopped.
DEFAULT_TIMEOUT = 600.0

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent exits (no-op elsewhere)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def run_models(fn: Callable, args: tuple, timeout: float | None, what: str) -> list:
    """``fn(*args)`` -> ONNX model(s), computed in a child process killed after ``timeout``
    seconds (``None`` or ``0``: no limit, run here)."""
    import onnx  # noqa: PLC0415

    if not timeout:
        result = fn(*args)
        return list(result) if isinstance(result, (list, tuple)) else [result]
    with tempfile.TemporaryDirectory(prefix="edgeconv-child-") as tmp:
        read_end, write_end = os.pipe()
        parent_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            os.close(read_end)
            _child(fn, args, Path(tmp), write_end, parent_pid)
        os.close(write_end)
        status = _wait(pid, read_end, timeout, what)
        if status.get("error") is not None:
            raise _error(status)
        return [onnx.load(str(Path(tmp) / name), load_external_data=True) for name in status["files"]]


def _child(fn, args, tmp: Path, write_end: int, parent_pid: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent()
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        from .load import save_onnx  # noqa: PLC0415

        result = fn(*args)
        models = list(result) if isinstance(result, (list, tuple)) else [result]
        files = []
        for i, model in enumerate(models):
            save_onnx(model, tmp / f"model{i}.onnx")
            files.append(f"model{i}.onnx")
        status = {"files": files}
    except EdgeconvError as err:
        status = {"error": str(err), "exit_code": err.exit_code, "kind": type(err).__name__}
    except MemoryError as err:
        status = {"error": f"out of memory ({err})", "exit_code": 2, "kind": "BadInput"}
    except BaseException as err:  # noqa: BLE001 - reported to the parent, which decides
        status = {"error": f"internal error: {type(err).__name__}: {err}", "exit_code": EXIT_INTERNAL,
                  "kind": "EdgeconvError"}
    try:
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(json.dumps(status))
    except BaseException:  # noqa: BLE001
        code = 1
    os._exit(code)


def _wait(pid: int, read_end: int, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    finished = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut(f"{what} did not finish within {timeout:g} s (--timeout); it was stopped")
            ready, _, _ = select.select([read_end], [], [], min(left, 0.2))
            if ready:
                data = os.read(read_end, 1 << 16)
                if not data:  # the child closed its end: finished or died
                    break
                chunks.append(data)
        _, raw = os.waitpid(pid, 0)
        finished = True
    finally:
        os.close(read_end)
        if not finished:  # timeout, Ctrl-C or SIGTERM in the parent: stop the child for good
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    if chunks:
        return json.loads(b"".join(chunks))
    if os.WIFSIGNALED(raw):
        name = signal.Signals(os.WTERMSIG(raw)).name
        return {"error": f"{what} crashed (the process died of {name})", "exit_code": 2, "kind": "BadInput"}
    return {"error": f"{what} ended without a result (exit status {os.WEXITSTATUS(raw)})", "exit_code": 2,
            "kind": "BadInput"}


def _error(status: dict) -> EdgeconvError:
    from . import errors  # noqa: PLC0415

    cls = getattr(errors, status.get("kind", ""), None)
    if isinstance(cls, type) and issubclass(cls, EdgeconvError) and cls.__init__ is EdgeconvError.__init__:
        err = cls(status["error"])
    else:
        err = BadInput(status["error"]) if status.get("exit_code") == 2 else EdgeconvError(status["error"])
        err.exit_code = status.get("exit_code", EXIT_INTERNAL)
    return err
