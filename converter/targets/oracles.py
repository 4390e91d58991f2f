"""Which runner judges a target's files: the framework's real runtime when the user has one, else
the target's built-in executor -- always named by its :class:`~converter.runtimes.base.Oracle`.

A target declares its pluggable real runtime (``Target.runtime_env``, ``Target.load_runtime``):
TNN's ``tnn_run``/``TNNTest`` (``targets/tnn/runtime.py``), MACE's ``mace_run``
(``targets/mace/runtime.py``); nothing here names a framework.  Selection, most specific first:
``--runtime NAME=PATH`` (``port``, ``verify``, ``batch``), a batch manifest's ``runtimes:``, then the
target's environment variable (``EDGECONV_TNN_RUNTIME``, ...).  A path that does not exist or is
not such a tool is bad input (exit 2).

:func:`bind` wraps a :class:`~converter.targets.base.Target` so that ``run`` and
``intermediates`` go to the real runtime (``intermediates`` falls back to the target's reader
when the runtime cannot expose tensors); :func:`runner_of` makes the
:class:`~converter.runtimes.base.Runner` verification compares.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import BadInput
from ..runtimes.base import RUNTIME, Oracle, RealRuntime, TargetRunner


def pluggable() -> dict[str, str]:
    """Framework -> the environment variable naming its real runtime, for every target that has one."""
    from . import get, names

    return {name: env for name in names() if (env := get(name).runtime_env)}


def parse_runtime_flags(flags: Iterable[str] | None) -> dict[str, str]:
    """``["tnn=PATH", "mace=PATH"]`` -> ``{"tnn": PATH, "mace": PATH}`` (BadInput otherwise)."""
    out: dict[str, str] = {}
    for flag in flags or ():
        name, sep, path = str(flag).partition("=")
        name = name.strip().lower()
        if not sep or not path.strip():
            raise BadInput(f"--runtime {flag}: expected FRAMEWORK=PATH, e.g. tnn=/opt/tnn/bin/tnn_run")
        if name not in pluggable():
            raise BadInput(f"--runtime {flag}: no pluggable runtime for '{name}'; choose one of: "
                           f"{', '.join(pluggable())}")
        out[name] = path.strip()
    return out


def chosen_path(framework: str, given: dict[str, str] | None = None) -> str | None:
    """The runtime path for ``framework``: flag/manifest (``given``) first, then its env var."""
    if given and given.get(framework):
        return given[framework]
    env = pluggable().get(framework)
    return (os.environ.get(env, "") or None) if env else None


def load_runtime(framework: str, path: str | os.PathLike) -> RealRuntime:
    """The adapter for ``path`` (BadInput when it is not a usable tool)."""
    from . import get, names

    if framework not in names() or not get(framework).runtime_env:
        raise BadInput(f"no pluggable runtime for '{framework}'; choose one of: {', '.join(pluggable())}")
    return get(framework).load_runtime(Path(path))


def resolve(framework: str, given: dict[str, str] | None = None, hw: str | None = None) -> RealRuntime | None:
    """The real runtime the user chose for ``framework``, or None (use the built-in executor);
    with ``hw``, None too when that runtime cannot run files for ``hw`` (mace_run and a DSP
    file; a GPU file it runs as its CPU twin, :func:`converter.targets.mace.runtime.cpu_twin`)."""
    path = chosen_path(framework, given)
    runtime = None if path is None else load_runtime(framework, path)
    return None if runtime is None or (hw is not None and not runtime.serves(hw)) else runtime


def validate(given: dict[str, str] | None) -> None:
    """Fail early (exit 2) on a runtime path that is not usable, env vars included."""
    for framework in pluggable():
        path = chosen_path(framework, given)
        if path is not None:
            load_runtime(framework, path)


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


def builtin_oracle(executor: str) -> Oracle:
    """The oracle of a built-in executor by its name (``Artifact.runtime``: "litert",
    "tnn-reader+onnxruntime", "mil-numpy", ...), asked of the target that runs it."""
    from . import get, names

    for name in names():
        target = get(name)
        if executor in target.executors:
            return target.executor_oracle(executor)
    return Oracle(executor or "unknown executor", "reader")


def oracle_of(target, artifact) -> Oracle:
    """The oracle that runs ``artifact`` for ``target`` (bound or built-in; a wrapper that
    keeps the wrapped target as ``.target`` is looked through)."""
    inner = getattr(target, "target", None)
    while not isinstance(target, BoundTarget) and hasattr(inner, "run"):
        target, inner = inner, getattr(inner, "target", None)
    if isinstance(target, BoundTarget):
        return Oracle(target.runtime.oracle_name(getattr(artifact, "hw", "")), RUNTIME)
    executor = getattr(artifact, "runtime", "") or ""
    if hasattr(target, "executor_oracle") and executor in getattr(target, "executors", ()):
        return target.executor_oracle(executor)
    return builtin_oracle(executor)


def runner_of(target, artifact) -> TargetRunner:
    """The :class:`~converter.runtimes.base.Runner` of an exported file: its target's executor
    (or the real runtime it is bound to), named by its oracle."""
    return TargetRunner(target, artifact, oracle_of(target, artifact))
