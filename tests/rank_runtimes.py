"""Run exported TNN / MACE files in the frameworks' real runtimes (``../shared/runtimes``, test
oracles only; see its README).  Minimal and local to the rank/legalization tests: each call writes
the inputs as raw files, runs the runtime's command-line tool and reads the outputs back."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

# The runtimes sit beside the checkout (``../shared/runtimes``); EDGECONV_RUNTIMES points elsewhere.
RUNTIMES = Path(os.environ.get("EDGECONV_RUNTIMES") or Path(__file__).resolve().parents[2] / "shared" / "runtimes")
TNN_RUN = RUNTIMES / "tnn" / "bin" / "tnn_run"
MACE_RUN = RUNTIMES / "mace" / "bin" / "mace_run"


def need(tool: Path):
    if not tool.exists():
        pytest.skip(f"real runtime not present: {tool}")


def tnn_run(artifact, inputs: dict[str, np.ndarray], tmp: Path, device: str = "X86") -> dict[str, np.ndarray]:
    """Outputs of TNN's interpreter (``tnn_run``) by ONNX output name."""
    need(TNN_RUN)
    tmp.mkdir(parents=True, exist_ok=True)
    args = [str(TNN_RUN), str(artifact.files[0]), device, str(tmp / "out")]
    for spec in artifact.meta["inputs"]:
        path = tmp / f"in_{len(args)}.raw"
        np.ascontiguousarray(inputs[spec["name"]], dtype=np.float32).tofile(path)
        args.append(f"{spec['tnn_name']}={path}")
    res = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"tnn_run failed: {res.stderr.strip()[-600:]}"
    by_blob = {}
    for line in (tmp / "out" / "outputs.txt").read_text().splitlines():
        name, dtype, ndims, *rest = line.split()
        dims, file = [int(d) for d in rest[:int(ndims)]], rest[int(ndims)]
        by_blob[name] = np.fromfile(tmp / "out" / file, dtype=np.dtype(dtype)).reshape(dims)
    return {o["name"]: by_blob[o["tnn_name"]] for o in artifact.meta["outputs"]}


def _mace_file(prefix: Path, name: str) -> Path:
    return Path(f"{prefix}_{re.sub(r'[^0-9A-Za-z]', '_', name)}")


def mace_run(artifact, inputs: dict[str, np.ndarray], tmp: Path) -> dict[str, np.ndarray]:
    """Outputs of MACE's own runner (``mace_run``, CPU) by ONNX output name, in ONNX layout."""
    need(MACE_RUN)
    tmp.mkdir(parents=True, exist_ok=True)
    name = artifact.meta["name"]
    ins, outs = artifact.meta["inputs"], artifact.meta["outputs"]
    for spec in ins:
        value = np.asarray(inputs[spec["name"]], dtype=np.float32)
        value = value.transpose(0, 2, 3, 1) if spec["data_format"] == 1 else value
        np.ascontiguousarray(value).tofile(_mace_file(tmp / "in", spec["name"]))
    fmt = {0: "NONE", 1: "NHWC", 2: "NCHW"}
    res = subprocess.run([
        str(MACE_RUN), f"--model_file={artifact.out_dir / (name + '.pb')}",
        f"--model_data_file={artifact.out_dir / (name + '.data')}",
        "--input_node=" + ",".join(s["name"] for s in ins),
        "--input_shape=" + ":".join(",".join(map(str, s["mace_dims"])) for s in ins),
        # every per-tensor flag needs one value per tensor: mace_run indexes its split list
        "--input_data_format=" + ",".join(fmt[s["data_format"]] for s in ins),
        "--input_data_type=" + ",".join("float32" for _ in ins),
        "--output_data_type=" + ",".join("float32" for _ in outs),
        "--output_node=" + ",".join(s["name"] for s in outs),
        "--output_shape=" + ":".join(",".join(map(str, s["mace_dims"])) for s in outs),
        "--output_data_format=" + ",".join(fmt[s["data_format"]] for s in outs),
        f"--input_file={tmp / 'in'}", f"--output_file={tmp / 'out'}", "--round=1"],
        capture_output=True, text=True, timeout=120)
    results = {}
    for spec in outs:
        path = _mace_file(tmp / "out", spec["name"])
        # mace_run may exit 0 without writing on some failures, or abort: both leave no file
        assert path.exists(), f"mace_run wrote no {spec['name']} (exit {res.returncode}): {res.stderr.strip()[-600:]}"
        value = np.fromfile(path, dtype=np.float32).reshape(spec["mace_dims"])
        results[spec["name"]] = value.transpose(0, 3, 1, 2) if spec["data_format"] == 1 else value
    return results
