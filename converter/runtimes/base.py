"""The execution boundary: what runs a model or an exported file, and the name it answers to.

Everything that computes numbers edgeconv judges is a :class:`Runner` (Polygraphy's split): it is
``activate``-d, ``infer``-s feeds to outputs (by ONNX name, in ONNX layout and dtype), may expose
``intermediates``, and is ``deactivate``-d; its ``oracle`` names it in every verdict.  Runners are
onnxruntime (:mod:`.onnxruntime`), a target's built-in executor (LiteRT, edgeconv's TNN and MACE
readers, the CoreML program executor) and a framework's real runtime (:class:`RealRuntime`,
run as a subprocess on the exported files: ``tnn_run``, ``mace_run``).  Comparators
(:mod:`converter.verify`) turn two runners' outputs into a verdict.

An *oracle* (:class:`Oracle`) is a runtime (its refusal fails a port) or a reader (edgeconv's own
re-implementation of a framework's semantics: when it cannot run a file, the file may well be
fine, and the port is ``unverified``).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from ..errors import BadInput, EdgeconvError

RUNTIME, READER = "runtime", "reader"


@dataclass(frozen=True)
class Oracle:
    """What judged a target stage: ``name`` as users read it, ``kind`` runtime or reader."""

    name: str
    kind: str = RUNTIME

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind}


class ReaderCannotRun(EdgeconvError):
    """A built-in reader/executor could not run a file (its own limitation, not the file's)."""


class RuntimeRefused(EdgeconvError):
    """The real runtime refused or failed to run the file (its own error message attached)."""


#: The largest integer magnitude a feed may hold: int32, and a tool that reads integer inputs
#: through float32 (TNN's tnn_run) keeps only integers below 2**24 exact.
INT32_LIMIT, FLOAT32_EXACT_LIMIT = 2 ** 31, 2 ** 24


def integer_feed(value, name: str, dtype, limit: int, who: str) -> np.ndarray:
    """An integer feed (int64 token ids, say) as the ``dtype`` the file takes; a value the runtime
    cannot hold is one :class:`RuntimeRefused` line naming the constraint, never a silent wrap."""
    value = np.asarray(value)
    if value.size and value.dtype.kind in "iu" and (value.max() >= limit or value.min() < -limit):
        worst = int(value.max()) if value.max() >= limit else int(value.min())
        raise RuntimeRefused(f"{who} takes input '{name}' as {np.dtype(dtype).name} holding magnitudes below "
                             f"2**{int(limit).bit_length() - 1}; it holds {worst}")
    return np.ascontiguousarray(value, dtype=dtype)


@cache
def package_version(dist: str) -> str:
    """The installed version of ``dist`` ("?" when absent), looked up once."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def onnxruntime_oracle() -> Oracle:
    return Oracle(f"onnxruntime {package_version('onnxruntime')}")


def one_line(err: BaseException) -> str:
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return line[:400]


class Runner(ABC):
    """One thing that computes outputs from feeds.  ``oracle`` names it; ``infer`` activates it
    on first use, so a runner whose model cannot load fails in the stage that runs it."""

    oracle: Oracle

    def activate(self) -> None:  # noqa: B027 - optional: most runners load on first use
        """Load what ``infer`` needs (a session, an interpreter); idempotent."""

    @abstractmethod
    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by ONNX name."""

    def deactivate(self) -> None:  # noqa: B027 - optional: nothing to free by default
        """Free what ``activate`` loaded; ``infer`` activates again if called later."""

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.infer(feeds)

    #: Verification frees a runner once its stage ran (``release`` is ``deactivate``).
    def release(self) -> None:
        self.deactivate()


class TargetRunner(Runner):
    """An exported file run by ``executor`` (a target, or a target bound to a real runtime):
    ``infer`` is ``executor.run(artifact, feeds)``, ``intermediates`` its per-layer tensors.

    When the oracle is a built-in *reader* and it cannot run the file, that is the reader's
    limit, not the file's: :class:`ReaderCannotRun` (the stage is ``unverified``, not failed).
    A real runtime that refuses the file raises :class:`RuntimeRefused` and fails the stage."""

    def __init__(self, executor, artifact, oracle: Oracle):
        self.executor, self.artifact, self.oracle = executor, artifact, oracle

    def infer(self, feeds):
        from ..errors import RuntimeUnavailable, TimedOut

        try:
            return self.executor.run(self.artifact, feeds)
        except (RuntimeUnavailable, RuntimeRefused, ReaderCannotRun, TimedOut):
            raise  # TimedOut: past --timeout, the whole run stops (exit 9), no verdict on the file
        except Exception as err:  # noqa: BLE001 - any reader failure is the reader's
            if self.oracle.kind != READER:
                raise
            raise ReaderCannotRun(f"target stage unverified: reader could not run it ({self.oracle.name}: "
                                  f"{one_line(err)})") from None

    def intermediates(self, feeds):
        return self.executor.intermediates(self.artifact, feeds)


class RealRuntime(ABC):
    """A framework's own interpreter, run as a subprocess on the exported files."""

    framework: str = ""
    title: str = ""
    #: Can it return tensors other than the file's outputs (per-layer localization)?
    exposes_intermediates: bool = False

    def oracle_name(self, hw: str) -> str:
        """The name verdicts give this runtime for hardware ``hw`` (e.g. the device it runs)."""
        return self.title

    def serves(self, hw: str) -> bool:
        """Can it run a file exported for ``hw``?  (Else the built-in executor judges it.)"""
        return True

    @abstractmethod
    def run(self, artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The file's outputs by ONNX output name, as the runtime computed them."""

    def intermediates(self, artifact, inputs: dict[str, np.ndarray]):
        """Inner tensors by ONNX name; only runtimes with ``exposes_intermediates`` have them
        (callers check it and localize with the built-in reader otherwise)."""
        raise RuntimeRefused(f"{self.title} cannot expose intermediate tensors")


def locate_binary(fw: str, path: Path, names: tuple[str, ...], what: str) -> Path:
    """The executable ``--runtime fw=path`` names: the file itself, or the first of ``names``
    (relative paths) inside the directory; BadInput saying what is wrong otherwise."""
    if path.is_dir():
        found = next((path / rel for rel in names if (path / rel).is_file()), None)
        if found is None:
            raise BadInput(f"--runtime {fw}={path}: no {what} in this directory (or its bin/)")
        path = found
    if not path.is_file():
        raise BadInput(f"--runtime {fw}={path}: no such file")
    if not os.access(path, os.X_OK):
        raise BadInput(f"--runtime {fw}={path}: not executable")
    return path.absolute()  # "./tnn_run" runs that file, not one found on PATH
