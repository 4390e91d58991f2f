"""Which runtime judges a target stage: the framework's real interpreter when the user has one,
else the target's built-in executor, always named.

Real runtimes (never shipped with edgeconv; a user builds them from the frameworks' sources):

* TNN: ``tnn_run`` (a raw-I/O runner around libTNN, see :mod:`.tnn`) or TNN's own ``TNNTest``,
  or a TNN build directory holding either under ``bin/``;
* MACE: ``mace_run`` (MACE's own model runner, see :mod:`.mace`).

Selection, most specific first: ``--runtime tnn=PATH`` / ``--runtime mace=PATH`` (``port``,
``verify``, ``batch``), a batch manifest's ``runtimes: {tnn: PATH, mace: PATH}``, then the
environment variables ``EDGECONV_TNN_RUNTIME`` / ``EDGECONV_MACE_RUNTIME``.  A path that does not
exist or is not such a tool is bad input (exit 2).

:func:`bind` wraps a :class:`~converter.targets.base.Target` so that ``run`` and
``intermediates`` go to the real runtime (``intermediates`` falls back to the target's reader
when the runtime cannot expose tensors); the wrapped object keeps the Target interface.

Every verdict names its *oracle* (:class:`Oracle`): what computed the target's numbers, e.g.
"TNN x86 runtime (tnn_run)", "MACE CPU runtime (mace_run)", "LiteRT 2.3.0", "edgeconv TNN reader
(onnxruntime 1.31.1)", "CoreML MIL executor (no device)".  A *reader* oracle is edgeconv's own
re-implementation of the framework's semantics: when it cannot run a file, the target stage is
``unverified`` (the file may well be fine), while a *runtime* oracle that refuses a file fails it.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from collections.abc import Iterable

import numpy as np

from ..errors import BadInput, EdgeconvError

#: Frameworks with a pluggable real runtime, and the environment variable naming it.
ENV = {"tnn": "EDGECONV_TNN_RUNTIME", "mace": "EDGECONV_MACE_RUNTIME"}

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


# ----------------------------------------------------------------------------------- oracles


@cache
def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def onnxruntime_oracle() -> Oracle:
    return Oracle(f"onnxruntime {_version('onnxruntime')}")


def builtin_oracle(runtime: str) -> Oracle:
    """The oracle a target's own ``run`` uses, from ``Artifact.runtime``."""
    # Built on demand: each version is a search of the installed distributions' metadata.
    known = {
        "litert": lambda: Oracle(f"LiteRT {_version('ai-edge-litert')}"),
        "tnn-reader+onnxruntime": lambda: Oracle(f"edgeconv TNN reader (onnxruntime {_version('onnxruntime')})",
                                                 READER),
        "mace-reader+onnxruntime": lambda: Oracle(f"edgeconv MACE reader (onnxruntime {_version('onnxruntime')})",
                                                  READER),
        "mil-numpy": lambda: Oracle("CoreML MIL executor (no device)", READER),
        "coreml": lambda: Oracle(f"CoreML runtime (coremltools {_version('coremltools')})"),
    }
    make = known.get(runtime)
    return make() if make is not None else Oracle(runtime or "unknown executor", READER)


# ------------------------------------------------------------------------------ real runtimes


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


def parse_runtime_flags(flags: Iterable[str] | None) -> dict[str, str]:
    """``["tnn=PATH", "mace=PATH"]`` -> ``{"tnn": PATH, "mace": PATH}`` (BadInput otherwise)."""
    out: dict[str, str] = {}
    for flag in flags or ():
        name, sep, path = str(flag).partition("=")
        name = name.strip().lower()
        if not sep or not path.strip():
            raise BadInput(f"--runtime {flag}: expected FRAMEWORK=PATH, e.g. tnn=/opt/tnn/bin/tnn_run")
        if name not in ENV:
            raise BadInput(f"--runtime {flag}: no pluggable runtime for '{name}'; choose one of: {', '.join(ENV)}")
        out[name] = path.strip()
    return out


def chosen_path(framework: str, given: dict[str, str] | None = None) -> str | None:
    """The runtime path for ``framework``: flag/manifest (``given``) first, then its env var."""
    if given and given.get(framework):
        return given[framework]
    return os.environ.get(ENV.get(framework, ""), "") or None


def load_runtime(framework: str, path: str | os.PathLike) -> RealRuntime:
    """The adapter for ``path`` (BadInput when it is not a usable tool)."""
    if framework == "tnn":
        from .tnn import tnn_runtime

        return tnn_runtime(Path(path))
    if framework == "mace":
        from .mace import mace_runtime

        return mace_runtime(Path(path))
    raise BadInput(f"no pluggable runtime for '{framework}'; choose one of: {', '.join(ENV)}")


def resolve(framework: str, given: dict[str, str] | None = None, hw: str | None = None) -> RealRuntime | None:
    """The real runtime the user chose for ``framework``, or None (use the built-in executor);
    with ``hw``, None too when that runtime cannot run files for ``hw`` (mace_run and a DSP
    file; a GPU file it runs as its CPU twin, :func:`.mace.cpu_twin`)."""
    path = chosen_path(framework, given)
    runtime = None if path is None else load_runtime(framework, path)
    return None if runtime is None or (hw is not None and not runtime.serves(hw)) else runtime


def validate(given: dict[str, str] | None) -> None:
    """Fail early (exit 2) on a runtime path that is not usable, env vars included."""
    for framework in ENV:
        path = chosen_path(framework, given)
        if path is not None:
            load_runtime(framework, path)


# ---------------------------------------------------------------------------------- binding


class BoundTarget:
    """A target whose ``run`` (and, where possible, ``intermediates``) use a real runtime.

    It keeps the :class:`~converter.targets.base.Target` surface the verifier uses (``name``,
    ``title``, ``run``, ``intermediates``); everything else is the wrapped target's."""

    def __init__(self, target, runtime: RealRuntime):
        self.target, self.runtime = target, runtime
        self.name, self.title = target.name, target.title

    def __getattr__(self, item):
        return getattr(self.target, item)

    def run(self, artifact, inputs):
        return self.runtime.run(artifact, inputs)

    def intermediates(self, artifact, inputs):
        if self.runtime.exposes_intermediates:
            return self.runtime.intermediates(artifact, inputs)
        return self.target.intermediates(artifact, inputs)


def bind(target, runtime: RealRuntime | None):
    return target if runtime is None else BoundTarget(target, runtime)


def oracle_of(target, artifact) -> Oracle:
    """The oracle that runs ``artifact`` for ``target`` (bound or built-in; a wrapper that
    keeps the wrapped target as ``.target`` is looked through)."""
    inner = getattr(target, "target", None)
    while not isinstance(target, BoundTarget) and hasattr(inner, "run"):
        target, inner = inner, getattr(inner, "target", None)
    if isinstance(target, BoundTarget):
        return Oracle(target.runtime.oracle_name(getattr(artifact, "hw", "")), RUNTIME)
    return builtin_oracle(getattr(artifact, "runtime", "") or "")


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
    return path
