"""Run user model code (TorchScript ``forward``, tracing, ``torch.onnx.export``) in a child
process with a time limit, where a signal really stops it; the time limits themselves are
:mod:`converter.infra.limits`.

A model whose ``forward`` loops forever keeps torch's C++ interpreter busy; Python signal
handlers only run between bytecodes, so SIGTERM and Ctrl-C were ignored.  Here the work runs in
a forked child; the parent waits in Python (so its handlers fire), and on timeout, SIGINT or
SIGTERM it kills the child with SIGKILL.  The child also dies with the parent
(``PR_SET_PDEATHSIG``), so ``kill -9`` of edgeconv leaves no orphan behind.

The child hands ONNX models back as files in a private temp directory, with ``status.json``
saying which, or the error as ``(exit code, one line)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import EXIT_INTERNAL, BadInput, EdgeconvError, TimedOut
from ..infra.limits import DEFAULT_TIMEOUT, die_with_parent  # noqa: F401  (DEFAULT_TIMEOUT: the loaders read it here)

#: The child's environment: OpenMP threads (torch's) sleep when idle instead of spinning.  The
#: child runs the model once, between short parallel regions; GCC's default spin-wait burnt
#: ~16% of its CPU time for nothing (perf, ResNet-18), on a machine shared with the parent.
_CHILD_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def run_models(fn: Callable, args: tuple, timeout: float | None, what: str,
               meanwhile: Iterable[Callable[[], object]] = ()) -> list:
    """``fn(*args)`` -> ONNX model(s), computed in a child process killed after ``timeout``
    seconds (``None`` or ``0``: no limit, run here).

    ``meanwhile``: steps this process runs while the child works (imports the later stages
    need), one by one until the child is done; their errors are ignored.

    A single-threaded process forks (fast: the child already has our modules).  A process with
    threads (onnxruntime's or torch's pools after earlier work, a test runner) must not fork: a
    lock held by another thread at fork time stays locked forever in the child.  It starts a
    fresh interpreter instead, which reads ``fn`` and ``args`` (our own values) from a pickle."""
    import onnx

    if not timeout:
        result = fn(*args)
        return [m.load() if hasattr(m, "move_to") else m
                for m in (result if isinstance(result, (list, tuple)) else [result])]
    from ..infra.fsutil import private_temp_dir

    with private_temp_dir("child") as tmp_path:
        if _single_threaded():
            _run_forked(fn, args, tmp_path, timeout, what, meanwhile)
        else:
            _run_spawned(fn, args, tmp_path, timeout, what, meanwhile)
        status = _read_status(tmp_path)
        if status.get("error") is not None:
            raise _error(status)
        return [onnx.load(str(tmp_path / name), load_external_data=True) for name in status["files"]]


def can_fork() -> bool:
    """Whether :func:`run_models` forks here (one thread): its child then holds this process's
    objects (a live torch module); otherwise it spawns a fresh interpreter, which gets its
    arguments as a pickle."""
    return _single_threaded()


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _run_forked(fn, args, tmp: Path, timeout: float, what: str, meanwhile=()) -> None:
    parent_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            die_with_parent()
            for key, value in _CHILD_ENV.items():  # effective unless the parent loaded torch
                os.environ.setdefault(key, value)
            if os.getppid() == parent_pid:  # else the parent died before prctl took effect
                code = _compute(fn, args, tmp)
        finally:
            os._exit(code)

    def poll():
        done, raw = os.waitpid(pid, os.WNOHANG)
        return None if done == 0 else raw

    def kill():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    _wait(poll, kill, tmp, timeout, what, meanwhile)


def _run_spawned(fn, args, tmp: Path, timeout: float, what: str, meanwhile=()) -> None:
    import pickle
    import subprocess
    import sys

    (tmp / "call.pickle").write_bytes(pickle.dumps((fn.__module__, fn.__qualname__, args)))
    env = {**_CHILD_ENV, **os.environ}
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    # -P: the working directory (the user's, maybe holding a torch.py) is not on sys.path.
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    proc = subprocess.Popen([sys.executable, *safe_path, "-c",
                             "import sys, converter.frontend.isolate as i; i._spawned_main(sys.argv[1])",
                             str(tmp)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            preexec_fn=die_with_parent, close_fds=True)

    def poll():
        code = proc.poll()
        if code is None:
            return None
        return (-code & 0x7F) if code < 0 else code << 8  # as os.waitpid reports it

    def kill():
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()

    _wait(poll, kill, tmp, timeout, what, meanwhile)


def _spawned_main(tmp: str) -> None:
    """Entry point of a spawned child: compute, write status.json, exit."""
    import importlib
    import pickle

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    module, qualname, args = pickle.loads((Path(tmp) / "call.pickle").read_bytes())
    fn = importlib.import_module(module)
    for part in qualname.split("."):
        fn = getattr(fn, part)
    os._exit(_compute(fn, args, Path(tmp)))


def _compute(fn, args, tmp: Path) -> int:
    # The child's temporary files (the exporter's output, torch's own) go in the private
    # directory the parent removes: a child killed mid-export leaves nothing in TMPDIR.
    tempfile.tempdir = str(tmp)
    try:
        from ..ir.onnx_file import save_onnx

        result = fn(*args)
        models = list(result) if isinstance(result, (list, tuple)) else [result]
        files = []
        for i, model in enumerate(models):
            if hasattr(model, "move_to"):  # load.OnnxFile: the exporter's file, handed over as is
                model.move_to(tmp, f"model{i}.onnx")
            else:
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
        (tmp / "status.json.tmp").write_text(json.dumps(status))
        os.replace(tmp / "status.json.tmp", tmp / "status.json")
    except BaseException:  # noqa: BLE001
        return 1
    return 0


def _wait(poll, kill, tmp: Path, timeout: float, what: str, meanwhile=()) -> None:
    """Wait in Python (so SIGINT/SIGTERM handlers run) until the child exits; kill it on timeout
    or when the wait is interrupted.  Leaves status.json in ``tmp`` (or explains the death)."""
    deadline = time.monotonic() + timeout
    raw = None
    try:
        for step in meanwhile:  # the child works on the other core: use this one
            raw = poll()  # a reaped child cannot be polled again: keep what it said
            if raw is not None:
                break
            with contextlib.suppress(Exception):  # the stage that needs it reports the failure
                step()
        while raw is None:
            raw = poll()
            if raw is not None:
                break
            if time.monotonic() >= deadline:
                raise TimedOut(f"{what} did not finish within {timeout:g} s (--timeout); it was stopped")
            time.sleep(0.05)
    finally:
        if raw is None:  # timeout, Ctrl-C or SIGTERM in the parent: stop the child for good
            kill()
    if (tmp / "status.json").exists():
        return
    if os.WIFSIGNALED(raw):
        name = signal.Signals(os.WTERMSIG(raw)).name
        message = f"{what} crashed (the process died of {name})"
    else:
        message = f"{what} ended without a result (exit status {os.WEXITSTATUS(raw)})"
    (tmp / "status.json").write_text(json.dumps({"error": message, "exit_code": 2, "kind": "BadInput"}))


def _read_status(tmp: Path) -> dict:
    return json.loads((tmp / "status.json").read_text())


def _error(status: dict) -> EdgeconvError:
    from .. import errors

    cls = getattr(errors, status.get("kind", ""), None)
    if isinstance(cls, type) and issubclass(cls, EdgeconvError) and cls.__init__ is EdgeconvError.__init__:
        err = cls(status["error"])
    else:
        err = BadInput(status["error"]) if status.get("exit_code") == 2 else EdgeconvError(status["error"])
        err.exit_code = status.get("exit_code", EXIT_INTERNAL)
    return err
