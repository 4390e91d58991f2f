"""Time limits and signals for everything edgeconv runs that may not end: onnxruntime inference
(:func:`guarded_run`), the frameworks' own tools (:func:`run_tool`, killed with their whole process
group), and the child processes user model code runs in (:mod:`converter.frontend.isolate`).

``--timeout`` sets the limit once for the process (:func:`set_time_limit`); a :class:`Deadline`
spends one limit over several runs (a calibration set).  Ctrl-C and SIGTERM stop a run as well.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

from ..errors import TimedOut

#: ``--timeout`` default: seconds user model code may run (load, trace, export) before it is stopped.
DEFAULT_TIMEOUT = 600.0

_PR_SET_PDEATHSIG = 1

#: The time limit of this process's runs of model code (``--timeout``; 0 = none).
_limit = {"seconds": DEFAULT_TIMEOUT}


def set_time_limit(seconds: float | None) -> None:
    """``--timeout`` for everything this process runs: torch loading, onnxruntime inference."""
    _limit["seconds"] = DEFAULT_TIMEOUT if seconds is None else float(seconds)


def time_limit() -> float:
    return _limit["seconds"]


class Deadline:
    """One time limit (``--timeout``) for a whole task of many steps: calibration reads up to
    hundreds of files and runs one inference per sample, and the limit bounds the total, not each
    step.  :meth:`check` between steps; :func:`guarded_run` stops an inference at it too."""

    def __init__(self, what: str, seconds: float | None = None):
        self.what = what
        self.seconds = time_limit() if seconds is None else float(seconds)
        self.end = time.monotonic() + self.seconds if self.seconds else None

    def expired(self) -> TimedOut:
        return TimedOut(f"{self.what} did not finish within {self.seconds:g} s (--timeout); it was stopped")

    def check(self) -> None:
        if self.end is not None and time.monotonic() >= self.end:
            raise self.expired()


def guarded_run(sess, names, feeds: dict, what: str = "onnxruntime inference", deadline: Deadline | None = None):
    """``sess.run(names, feeds)`` that stops after the time limit and on Ctrl-C/SIGTERM.

    onnxruntime runs a graph (a Loop with a huge trip count, say) in C++ without returning to
    Python, so neither a timer nor a signal handler could stop it.  The run happens in a worker
    thread; this thread waits in Python and, when the time is up or a signal arrived, sets
    ``RunOptions.terminate``, which onnxruntime checks between nodes (Loop bodies included)."""
    import threading

    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4  # the terminate flag is ours: no native error line for it
    outcome: dict = {}
    done = threading.Event()  # not Thread.join: a join interrupted by a signal may not wait again

    def work():
        try:
            outcome["values"] = sess.run(names, feeds, options)
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = err
        finally:
            done.set()

    own = Deadline(what)
    binding = min((d for d in (own, deadline) if d is not None and d.end is not None), key=lambda d: d.end,
                  default=None)
    threading.Thread(target=work, name="edgeconv-ort", daemon=True).start()
    try:
        while not done.wait(0.05):
            if binding is not None and time.monotonic() >= binding.end:
                raise binding.expired()
    except BaseException:
        options.terminate = True
        done.wait(30)  # onnxruntime checks the flag between nodes: this is quick
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["values"]


def run_tool(args: list[str], what: str, env: dict | None = None):
    """Run an external tool (a framework's runtime: ``tnn_run``, ``mace_run``) as
    ``subprocess.run(args, capture_output=True, text=True)`` does, within the time limit
    (``--timeout``): in a process group of its own, killed *as a group* (the tool and every process
    it started) at the limit, on Ctrl-C and on SIGTERM, so nothing it started outlives the run.
    The tool dies with this process too (``PR_SET_PDEATHSIG``).  TimedOut (exit 9) at the limit."""
    import subprocess

    limit = time_limit() or None
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", env=env, start_new_session=True, preexec_fn=die_with_parent)
    try:
        out, err = proc.communicate(timeout=limit)
    except BaseException as exc:
        _kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise TimedOut(f"{what} did not finish within {limit:g} s (--timeout); it was stopped, with every "
                           "process it started") from None
        raise
    _kill_group(proc)  # what the tool left running in its group (a daemon it forked) ends with it
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _kill_group(proc) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)


def _find_prctl():
    with contextlib.suppress(Exception):
        return ctypes.CDLL(None, use_errno=True).prctl
    return None


#: libc's prctl, looked up when this module loads.  :func:`die_with_parent` runs in a child
#: between fork and exec (``preexec_fn``), where a dlopen/dlsym waits forever if another thread
#: held the loader's lock at the fork: tnn_run's fork hung so under qemu while a verification
#: thread opened an onnxruntime session.  Calling an address resolved here takes no lock.
_PRCTL = _find_prctl()


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent exits (no-op elsewhere)."""
    if _PRCTL is not None:
        with contextlib.suppress(Exception):
            _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
