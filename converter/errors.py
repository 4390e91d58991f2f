"""Errors that the CLI turns into one line and a documented exit code.

Exit codes (also in docs/usage.md; the port statuses' in README.md):
  0  success
  2  bad input: missing/corrupt file, unsafe pickle, bad flag or manifest, a model too big for
     ``--max-memory``, an output directory another edgeconv run holds (its lock file)
  3  unsupported and no remedy (``check`` also uses it for "not fully supported")
  4  verification failed: converted outputs differ beyond tolerance
  5  a needed optional extra or runtime is not installed
  6  ``batch``: one or more jobs failed (``converter.batch.runner.EXIT_BATCH_FAILED``)
  7  needs custom kernels: the port's file carries custom ops nobody has implemented yet
     (status ``needs_custom``; files written, target stage not run)
  8  target stage unverified: the built-in reader standing in for the framework could not run
     the file (status ``unverified``; files written, ONNX stages verified; give ``--runtime``),
     or onnxruntime cannot load or run the original, so nothing checked the files
  9  user model code (TorchScript forward, tracing, export) did not finish within ``--timeout``
  70 internal error (a bug in edgeconv)
  130 interrupted (Ctrl-C, SIGINT); 143 terminated (SIGTERM)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_UNSUPPORTED = 3
EXIT_VERIFY_FAILED = 4
EXIT_MISSING_EXTRA = 5
EXIT_NEEDS_CUSTOM = 7
EXIT_UNVERIFIED = 8
EXIT_TIMEOUT = 9
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class EdgeconvError(Exception):
    """Base class: ``str(err)`` is the one line the user sees."""

    exit_code = EXIT_INTERNAL


class BadInput(EdgeconvError):
    exit_code = EXIT_BAD_INPUT


class Unsupported(EdgeconvError):
    exit_code = EXIT_UNSUPPORTED


class VerificationFailed(EdgeconvError):
    exit_code = EXIT_VERIFY_FAILED


class MissingExtra(EdgeconvError):
    exit_code = EXIT_MISSING_EXTRA

    def __init__(self, extra: str, what: str):
        super().__init__(f"{what} needs the '{extra}' extra: pip install 'edgeconv[{extra}]'")
        self.extra = extra


class RuntimeUnavailable(EdgeconvError):
    """A target has no runtime installable on this machine (TNN, MACE, CoreML on Linux)."""

    exit_code = EXIT_MISSING_EXTRA


class Interrupted(EdgeconvError):
    """The user stopped the run (Ctrl-C); whatever finished before is complete on disk."""

    exit_code = EXIT_INTERRUPTED


class TimedOut(EdgeconvError):
    """User model code (a TorchScript ``forward``, tracing, export) ran past ``--timeout``."""

    exit_code = EXIT_TIMEOUT
