"""The real TNN and MACE runtimes (``../shared/runtimes``, test oracles only; see its README),
through the package's own adapters (``converter/runtimes``): what users get with ``--runtime``
is what the tests use.  A test that needs a runtime skips, with the path it looked for, only
where the runtimes directory is absent."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# The runtimes sit beside the checkout (``../shared/runtimes``); EDGECONV_TEST_RUNTIMES points elsewhere.
RUNTIMES = Path(os.environ.get("EDGECONV_TEST_RUNTIMES") or Path(__file__).resolve().parents[2] / "shared" / "runtimes")
TNN_RUN = RUNTIMES / "tnn" / "bin" / "tnn_run"
TNN_TEST = RUNTIMES / "tnn" / "bin" / "TNNTest"
MACE_RUN = RUNTIMES / "mace" / "bin" / "mace_run"


def need(tool: Path):
    if not tool.exists():
        pytest.skip(f"real runtime not present: {tool} (../shared/runtimes, see its README)")


def tnn_runtime(device: str | None = None):
    from converter.runtimes.tnn import TnnRun

    need(TNN_RUN)
    return TnnRun(TNN_RUN, device=device)


def mace_runtime():
    from converter.runtimes.mace import MaceRun

    need(MACE_RUN)
    return MaceRun(MACE_RUN)


def tnn_run(artifact, inputs: dict[str, np.ndarray], tmp: Path | None = None, device: str = "X86") -> dict[str, np.ndarray]:
    """Outputs of TNN's interpreter (``tnn_run``) by ONNX output name; a refusal fails the test."""
    from converter.runtimes import RuntimeRefused

    try:
        return tnn_runtime(device).run(artifact, inputs)
    except RuntimeRefused as err:
        raise AssertionError(str(err)) from None


def mace_run(artifact, inputs: dict[str, np.ndarray], tmp: Path | None = None) -> dict[str, np.ndarray]:
    """Outputs of MACE's own runner (``mace_run``, CPU) by ONNX output name, in ONNX layout."""
    from converter.runtimes import RuntimeRefused

    try:
        return mace_runtime().run(artifact, inputs)
    except RuntimeRefused as err:
        raise AssertionError(str(err)) from None
