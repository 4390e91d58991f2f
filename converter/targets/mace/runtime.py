"""MACE's real interpreter as an oracle: MACE's own ``mace_run`` (CPU).

``mace_run --model_file=M.pb --model_data_file=M.data --input_node=a,b --input_shape=..:..
--input_data_format=.. --input_data_type=.. --output_node=.. --output_shape=..
--output_data_format=.. --output_data_type=.. --input_file=PREFIX --output_file=PREFIX --round=1``
reads ``PREFIX_<name>`` raw files (every non-alphanumeric character of the name as ``_``) and
writes outputs the same way.  Every per-tensor flag needs one value per tensor (mace_run indexes
its split lists).  It may exit 0 having written nothing, so each output file is checked.

A host build runs MACE's CPU kernels only, and a file names the runtime it is for (the net
argument ``runtime_type``): mace_run refuses a GPU file ("Current MACE doesn't support the runtime
type").  A ``--hw gpu`` file holds the same graph as its CPU twin (the same ops, arguments and
weights; only broadcast constants are written out in full for the OpenCL Eltwise kernel), so it is
run on a copy whose runtime type alone is switched to CPU (:func:`cpu_twin`; the user's file is
never touched), and its verdict names exactly that (:data:`GPU_ORACLE`): MACE's CPU kernels
computed the numbers, the OpenCL kernels did not run.  Each op computes in its ``T`` argument
(``net_def_adapter.cc:286-293``), float in every file edgeconv writes, so the GPU runs float
too and the CPU twin is judged with float tolerances.  dsp/apu files stay with the built-in reader.
4-D interfaces are NHWC in the file
(``data_format`` 1 in the artifact's meta): inputs are transposed in, outputs back to NCHW.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np

from ...errors import BadInput
from ...infra.fsutil import private_temp_dir
from ...infra.limits import run_tool
from ...runtimes.base import INT32_LIMIT, RealRuntime, RuntimeRefused, integer_feed, locate_binary

#: include/mace/public/mace.h RuntimeType values a file's ``runtime_type`` argument holds.
RT_CPU, RT_GPU = 0, 2
#: The oracle of a GPU file: what ran, and what did not.
GPU_ORACLE = "MACE CPU runtime (mace_run) on the GPU file's graph; GPU kernels not run here"
_FORMAT = {0: "NONE", 1: "NHWC", 2: "NCHW"}


def mace_runtime(path: Path) -> RealRuntime:
    return MaceRun(locate_binary("mace", path, ("bin/mace_run", "mace_run"), "mace_run"))


def io_file(prefix: Path, name: str) -> Path:
    return Path(f"{prefix}_{re.sub(r'[^0-9A-Za-z]', '_', name)}")


class MaceRun(RealRuntime):
    framework = "mace"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.title = "MACE CPU runtime (mace_run)"

    def serves(self, hw: str) -> bool:
        # The file names its runtime (net arg runtime_type); mace_run refuses a GPU/DSP/APU one:
        # "Current MACE doesn't support the runtime type" (runtime_registry.cc:61).  A GPU file
        # runs as its CPU twin (cpu_twin); DSP/APU files hold other ops (Hexagon NN nodes).
        return hw in ("", "cpu", "gpu")

    def oracle_name(self, hw: str) -> str:
        return GPU_ORACLE if hw == "gpu" else self.title

    def run(self, artifact, inputs):
        name = artifact.meta["name"]
        ins, outs = artifact.meta["inputs"], artifact.meta["outputs"]
        with private_temp_dir("mace") as tmp:
            work = Path(tmp)
            for spec in ins:
                if spec["name"] not in inputs:
                    raise BadInput(f"missing input '{spec['name']}' for the MACE model")
                value = np.asarray(inputs[spec["name"]])
                value = value.transpose(0, 2, 3, 1) if spec["data_format"] == 1 else value
                integer_feed(value, spec["name"], spec.get("dtype") or "float32", INT32_LIMIT,
                             "MACE's runtime (mace_run)").tofile(io_file(work / "in", spec["name"]))
            joined = lambda key, fn: ",".join(fn(s) for s in key)  # noqa: E731
            model_file = cpu_twin(artifact.out_dir / (name + ".pb"), work)
            args = [
                str(self.path), f"--model_file={model_file}",
                f"--model_data_file={artifact.out_dir / (name + '.data')}",
                "--input_node=" + joined(ins, lambda s: s["name"]),
                "--input_shape=" + ":".join(",".join(map(str, s["mace_dims"])) for s in ins),
                "--input_data_format=" + joined(ins, lambda s: _FORMAT[s["data_format"]]),
                "--input_data_type=" + joined(ins, lambda s: s.get("dtype") or "float32"),
                "--output_node=" + joined(outs, lambda s: s["name"]),
                "--output_shape=" + ":".join(",".join(map(str, s["mace_dims"])) for s in outs),
                "--output_data_format=" + joined(outs, lambda s: _FORMAT[s["data_format"]]),
                "--output_data_type=" + joined(outs, lambda s: s.get("dtype") or "float32"),
                f"--input_file={work / 'in'}", f"--output_file={work / 'out'}", "--round=1",
            ]
            res = run_tool(args, "MACE's runtime (mace_run)")
            results = {}
            for spec in outs:
                path = io_file(work / "out", spec["name"])
                if not path.is_file():
                    raise RuntimeRefused("MACE's runtime (mace_run) could not run the file: " + _detail(res))
                value = np.fromfile(path, dtype=spec.get("dtype") or "float32")
                if value.size != int(np.prod(spec["mace_dims"])):
                    raise RuntimeRefused(f"MACE's runtime (mace_run) wrote {value.size} values for "
                                         f"'{spec['name']}', expected shape {spec['mace_dims']}")
                value = value.reshape(spec["mace_dims"])
                value = value.transpose(0, 3, 1, 2) if spec["data_format"] == 1 else value
                results[spec["name"]] = value.astype(spec.get("onnx_dtype") or value.dtype, copy=False)
        return results


def cpu_twin(pb: Path, work: Path) -> Path:
    """``pb`` itself for a CPU file; for a GPU file, a copy in ``work`` whose device field (every
    net's ``runtime_type`` argument) says CPU and nothing else changed (``opencl_mem_type`` and
    the rest stay: the CPU runtime does not read them).  The weights file is shared as it is."""
    from ._generated import mace_pb2

    multi = mace_pb2.MultiNetDef()
    try:
        multi.ParseFromString(pb.read_bytes())
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise RuntimeRefused(f"{pb.name} is not a MACE MultiNetDef: {err}") from None
    args = [a for net in multi.net_def for a in net.arg if a.name == "runtime_type" and a.i == RT_GPU]
    if not args:
        return pb
    for arg in args:
        arg.i = RT_CPU
    twin = work / pb.name
    twin.write_bytes(multi.SerializeToString(deterministic=True))
    return twin


#: mace_run's start-up complaints on hosts without cpufreq (every run logs them; not the cause).
_BENIGN = ("cpuinfo_max_freq", "cpu max frequencies", "CPU core is empty")


def _detail(res: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in ((res.stderr or "") + "\n" + (res.stdout or "")).splitlines()
             if ln.strip() and not any(b in ln for b in _BENIGN)]
    # MACE logs "E mace/...: message" / "F ..." (fatal) / "Check failed: ..."
    picked = [ln for ln in lines if re.match(r"^[EF]\s|^F\d|^E\d|.*Check failed", ln)] or lines[-1:]
    if picked:
        return picked[0][:400]
    return f"killed by signal {-res.returncode}" if res.returncode < 0 else f"exit {res.returncode}, no output written"
