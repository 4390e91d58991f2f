"""Import coremltools and run its converter without its console noise.

On Linux ``import coremltools`` logs "Failed to load _MLModelProxy ..." (no native runtime), warns
about untested torch/TensorFlow versions, and TensorFlow's C++ logging (absl) writes to file
descriptor 2 directly; ``ct.convert`` draws tqdm progress bars.  Users should see one clean line,
so imports and conversions run with coremltools' loggers at ERROR and fds 1/2 redirected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from typing import Iterator

from ...errors import MissingExtra


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Swallow output written to fds 1 and 2 (Python and C++ alike) inside the block."""
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
    """The ``coremltools`` module, imported quietly; MissingExtra if it is not installed."""
    if sys.modules.get("coremltools") is None:
        logging.getLogger("coremltools").setLevel(logging.ERROR)
        try:
            with silenced():
                import coremltools  # noqa: F401, PLC0415
        except ImportError:
            raise MissingExtra("coreml", "the CoreML target") from None
    return sys.modules["coremltools"]
