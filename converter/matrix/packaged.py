"""Where the shipped ``op_support_matrix.yaml`` is: inside the package, read through importlib.resources.

The real file is ``converter/data/op_support_matrix.yaml`` and the repository root's
``op_support_matrix.yaml`` (the design card's place, linked from the README) is a symlink to it.
That way round is the robust one: a wheel, an sdist or an editable install gets the real content
from the package directory whatever the build tool does with symlinks, and a checkout without
symlink support (core.symlinks=false) loses only the convenience link at the root, never the data
the CLI reads.  The other way round (real file at the root, link or build-time copy inside the
package) breaks as soon as one tool does not follow the link or skip the copy step.
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources
from pathlib import Path

MATRIX_FILE = "op_support_matrix.yaml"


def packaged_matrix_path() -> Path:
    """A filesystem path of the packaged matrix (extracted once if the package is zipped)."""
    ref = resources.files("converter") / "data" / MATRIX_FILE
    if isinstance(ref, Path):
        return ref
    # A zipped package: load_matrix stats and caches files by path, so extract once for the
    # life of the process.
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    return Path(stack.enter_context(resources.as_file(ref)))
