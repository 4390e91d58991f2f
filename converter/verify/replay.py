"""Replay a failing verification: the exact inputs it used and the command that reruns it.

The inputs go to an ``.npz`` that :func:`converter.runtimes.feeds.load_npz` reads back (one array
per input, samples stacked on a new leading axis when there are several).  The file is written
byte-for-byte deterministically (fixed zip timestamps, stored members), so rerunning a failing
verification rewrites the same bytes.
"""

from __future__ import annotations

import io
import os
import shlex
import zipfile
from pathlib import Path

import numpy as np

from ..infra.fsutil import atomic_write_bytes, atomic_write_text
from .stages import Tolerances, VerifyReport

INPUTS_FILE = "verify-inputs.npz"
SCRIPT_FILE = "reproduce.sh"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip header can hold


def npz_bytes(samples: list[dict[str, np.ndarray]]) -> bytes:
    """The samples as ``.npz`` bytes, identical for identical samples."""
    if not samples:
        raise ValueError("no samples to write")
    names = list(samples[0])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in names:
            values = [np.asarray(s[name]) for s in samples]
            array = values[0] if len(values) == 1 else np.stack(values)
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, member.getvalue())
    return buf.getvalue()


def write_inputs(path: str | os.PathLike, samples: list[dict[str, np.ndarray]]) -> Path:
    return atomic_write_bytes(path, npz_bytes(samples))


def reproduce_command(
    original: str | os.PathLike,
    converted: str | os.PathLike,
    inputs_npz: str | os.PathLike,
    tolerances: Tolerances,
    tolerances_path: str | os.PathLike | None = None,
    runtimes: dict[str, str] | None = None,
) -> str:
    """The ``edgeconv verify`` command line that reruns the comparison on the same inputs.

    The model-wide tolerances go on the command line (they are what was in effect, flags and
    profile combined); the profile is passed too, for its per-output entries.
    """
    args = [
        "edgeconv", "verify", str(Path(original).resolve()), str(Path(converted).resolve()),
        "--inputs", str(Path(inputs_npz).resolve()),
        "--atol", repr(tolerances.default.atol), "--rtol", repr(tolerances.default.rtol),
        "--layer-tol", repr(tolerances.layer_rmse),
    ]
    if tolerances_path is not None:
        args += ["--tolerances", str(Path(tolerances_path).resolve())]
    for framework, path in sorted((runtimes or {}).items()):
        args += ["--runtime", f"{framework}={Path(path).resolve()}"]
    return shlex.join(args)


def write_replay(
    report: VerifyReport,
    out_dir: str | os.PathLike,
    original: str | os.PathLike | None,
    converted: str | os.PathLike | None,
    tolerances_path: str | os.PathLike | None = None,
    shown_dir: str | os.PathLike | None = None,
    runtimes: dict[str, str] | None = None,
) -> dict:
    """Write ``verify-inputs.npz`` and ``reproduce.sh`` into ``out_dir``; record them on ``report``.

    ``shown_dir``: where ``out_dir`` will be when the user reads it (``port`` writes into a
    temporary directory that is then renamed into place): every path the script, the JSON and
    the terminal show names it, never the temporary one.  ``original``/``converted`` are given
    as they will be then too.  Without model paths (nothing on disk to rerun) only the inputs
    are written.
    """
    out_dir = Path(out_dir)
    shown = Path(shown_dir).resolve() if shown_dir is not None else out_dir.resolve()
    write_inputs(out_dir / INPUTS_FILE, report.inputs)
    npz = shown / INPUTS_FILE
    if original is None or converted is None:
        report.replay = {"inputs": str(npz), "script": None, "command": None}
        return report.replay
    command = reproduce_command(original, converted, npz, report.tolerances, tolerances_path, runtimes)
    atomic_write_text(
        out_dir / SCRIPT_FILE,
        "#!/bin/sh\n# Reruns the failing edgeconv verification on the inputs it used.\n" + command + "\n",
    )
    report.replay = {"inputs": str(npz), "script": str(shown / SCRIPT_FILE), "command": command}
    return report.replay
