"""Import coremltools and run its converter without its console noise.

On Linux ``import coremltools`` logs "Failed to load _MLModelProxy ..." (no native runtime), warns
about untested torch/TensorFlow versions, and TensorFlow's C++ logging (absl) writes to file
descriptor 2 directly; ``ct.convert`` draws tqdm progress bars.  Users should see one clean line,
so imports and conversions run with coremltools' loggers at ERROR and fds 1/2 redirected.

edgeconv builds MIL programs itself and only needs coremltools' MIL builder, passes, protobuf
classes and package reader.  ``import coremltools`` would also import TensorFlow and torch (its
``_deps`` probes every frontend, and the frontends load when their probe succeeds): 3-5 s of a
CoreML export.  :func:`coremltools` imports it with those probes answered "not installed", so the
TF/torch frontends (and ``coremltools.optimize.torch``) are never loaded by edgeconv.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

from ...errors import MissingExtra


_SILENCE_LOCK = threading.Lock()
_SILENCE_DEPTH: list = [0]  # [depth, the ExitStack that restores the streams]


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Swallow output written to fds 1 and 2 (Python and C++ alike) inside the block.

    The streams are process-wide: with ports in threads (``port -j``) the first block to enter
    redirects them and the last one to leave restores them."""
    with _SILENCE_LOCK:
        _SILENCE_DEPTH[0] += 1
        first = _SILENCE_DEPTH[0] == 1
        if first:
            restore = contextlib.ExitStack()
            restore.enter_context(_redirected())
            _SILENCE_DEPTH.append(restore)
    try:
        yield
    finally:
        with _SILENCE_LOCK:
            _SILENCE_DEPTH[0] -= 1
            if _SILENCE_DEPTH[0] == 0:
                _SILENCE_DEPTH.pop().close()


@contextlib.contextmanager
def _redirected() -> Iterator[None]:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = []
    try:
        with tempfile.TemporaryFile() as sink:
            for fd in (1, 2):
                try:
                    saved.append((fd, os.dup(fd)))
                    os.dup2(sink.fileno(), fd)
                except OSError:
                    pass
            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull), \
                    contextlib.redirect_stderr(devnull):
                yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)


def coremltools():
    """The ``coremltools`` module, imported quietly and without its TF/torch frontends (unless
    something imported it before); MissingExtra if it is not installed."""
    with _IMPORT_LOCK:  # ports run in threads (port -j): one imports, the others wait for it
        if not _IMPORTED or sys.modules.get("coremltools") is None:
            logging.getLogger("coremltools").setLevel(logging.ERROR)
            try:
                with silenced(), without_frontends():
                    import coremltools  # noqa: F401
            except ImportError:
                raise MissingExtra("coreml", "the CoreML target") from None
            _IMPORTED.append(True)
    return sys.modules["coremltools"]


_IMPORT_LOCK = threading.Lock()
_IMPORTED: list[bool] = []


#: Packages ``coremltools._deps`` probes to enable a frontend (or an optional optimizer).
FRONTEND_PACKAGES = ("tensorflow", "torch", "torchvision", "torchaudio", "executorch", "torchao",
                     "transformers", "sklearn", "xgboost", "libsvm")
#: Its "frontend available" flags, all set False after it ran (names from coremltools 9.0's
#: ``_deps/__init__.py``; a flag a future version lacks is simply not set).
FRONTEND_FLAGS = ("_HAS_TF", "_HAS_TF_1", "_HAS_TF_2", "_HAS_TORCH", "_HAS_TORCH_EXPORT_API",
                  "_IMPORT_CT_OPTIMIZE_TORCH", "_HAS_TORCH_VISION", "_HAS_TORCH_AUDIO", "_HAS_EXECUTORCH",
                  "_HAS_TORCHAO", "_HAS_HF", "_HAS_SKLEARN", "_HAS_XGBOOST", "_HAS_LIBSVM")


class _FrontendsAbsent(importlib.abc.MetaPathFinder):
    """While installed, in the installing thread only: the frontend packages that are not yet
    imported look absent, and ``coremltools._deps`` reports every frontend unavailable (even
    torch when a torch source already imported it).  Other threads import normally."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()

    def find_spec(self, fullname, path=None, target=None):
        if threading.get_ident() != self.thread:
            return None
        if fullname.partition(".")[0] in FRONTEND_PACKAGES:
            raise ModuleNotFoundError(f"No module named '{fullname}' (edgeconv: not needed by the MIL builder)",
                                      name=fullname)
        if fullname == "coremltools._deps":
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _DepsLoader(spec.loader)
            return spec
        return None


class _DepsLoader(importlib.abc.Loader):
    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        for flag in FRONTEND_FLAGS:
            if hasattr(module, flag):
                setattr(module, flag, False)


@contextlib.contextmanager
def without_frontends() -> Iterator[None]:
    finder = _FrontendsAbsent()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
