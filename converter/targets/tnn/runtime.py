"""TNN's real interpreter as an oracle: ``tnn_run`` (raw-file I/O) or TNN's own ``TNNTest``.

``tnn_run PROTO DEVICE OUTDIR NAME=FILE ...`` (a small runner around libTNN) reads each input as
raw float32 in the shape the .tnnproto declares (int32 inputs are rounded) and writes
``OUTDIR/outputs.txt`` (``NAME DTYPE NDIMS D.. FILE`` per output) plus one raw file per output;
it exits non-zero with TNN's own message when Init or Forward fails.  Because it reads the
output list from the proto, a copy of the proto that lists every blob as an output gives the
real runtime's intermediate tensors (per-layer localization).

``TNNTest -mt TNN -mp PROTO -dt DEVICE -ip FILE -op FILE`` reads whitespace-separated numbers from
one text file into *every* input (so it can judge single-input models only) and prints outputs
with six decimals (absolute resolution 5e-7, stated in the oracle name).

Devices on a host build: ``X86`` (AVX2/FMA kernels) and ``NAIVE`` (TNN's reference kernels).
``--hw naive`` runs NAIVE; every other TNN hardware is judged on X86, the host's CPU kernels.
A ``.tnnproto`` names no device (TNN picks it when the network is created, ``NetworkConfig``), so
a file exported for a GPU or an NPU *is* the graph the X86 device runs: no copy needs switching.
Such a verdict says so (:func:`oracle_for`): "TNN x86 runtime (tnn_run) on the OpenCL file's
graph; OpenCL kernels not run here".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

from ...errors import BadInput
from ...infra.fsutil import private_temp_dir
from ...infra.limits import run_tool
from ...runtimes.base import FLOAT32_EXACT_LIMIT, RealRuntime, RuntimeRefused, integer_feed, locate_binary


def tnn_runtime(path: Path) -> RealRuntime:
    """The adapter for a ``tnn_run``/``TNNTest`` binary or a TNN build dir holding one."""
    path = locate_binary("tnn", path, ("bin/tnn_run", "tnn_run", "bin/TNNTest", "TNNTest", "test/TNNTest"),
                         "tnn_run or TNNTest")
    if path.name.lower().startswith("tnntest"):
        return TnnTest(path)
    return TnnRun(path)


def device_for(hw: str) -> str:
    return "NAIVE" if hw == "naive" else "X86"


#: TNN hardware whose own kernels (or NPU graph builders) a host build does not have, as verdicts
#: name them; the CPU columns (arm, x86, naive) run CPU kernels of the same layers.
NOT_RUN_HERE = {"opencl": "OpenCL", "metal": "Metal", "cuda": "CUDA", "openvino": "OpenVINO",
                "huawei_npu": "Huawei NPU", "rknpu": "RKNPU", "apple_npu": "Apple NPU"}


def oracle_for(title: str, hw: str) -> str:
    """``title`` (what ran) for a file of ``hw``, saying what did not run where that matters."""
    device = NOT_RUN_HERE.get(hw)
    return title if device is None else f"{title} on the {device} file's graph; {device} kernels not run here"


def _fail(tool: str, res: subprocess.CompletedProcess) -> RuntimeRefused:
    lines = [ln.strip() for ln in (res.stderr or "").splitlines() if ln.strip()]
    # TNN logs "E/tnn: <function> [File ...][Line n] message": the first error line names the cause
    errors = [ln for ln in lines if ln.startswith("E/tnn")] or lines
    detail = errors[0] if errors else (f"killed by signal {-res.returncode}" if res.returncode < 0
                                        else f"exit {res.returncode}, no message")
    return RuntimeRefused(f"{tool} could not run the file: {detail[:400]}")


def _env(tool: Path) -> dict:
    env = dict(os.environ)
    lib = tool.resolve().parent.parent / "lib"
    if lib.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


class TnnRun(RealRuntime):
    framework = "tnn"
    exposes_intermediates = True

    def __init__(self, path: Path, device: str | None = None):
        self.path = Path(path)
        #: ``X86`` or ``NAIVE``; None: by the artifact's hardware (:func:`device_for`).
        self.device = device
        self.title = "TNN x86 runtime (tnn_run)"

    def _device(self, hw: str) -> str:
        return self.device or device_for(hw)

    def oracle_name(self, hw: str) -> str:
        return "TNN naive runtime (tnn_run)" if self._device(hw) == "NAIVE" else oracle_for(self.title, hw)

    def _invoke(self, proto: Path, artifact, inputs, work: Path) -> dict[str, np.ndarray]:
        args = [str(self.path), str(proto), self._device(artifact.hw), str(work / "out")]
        declared = {spec.split()[0] for spec in _records(proto.read_text(encoding="utf-8"))[1].split(":") if spec.split()}
        for k, spec in enumerate(artifact.meta["inputs"]):
            if spec["name"] not in inputs:
                raise BadInput(f"missing input '{spec['name']}' for the TNN model")
            raw = work / f"in{k}.raw"
            # tnn_run reads every input as float32 (an int32 blob rounds it)
            integer_feed(inputs[spec["name"]], spec["name"], np.float32, FLOAT32_EXACT_LIMIT,
                         "TNN's runtime (tnn_run)").tofile(raw)
            name = spec["tnn_name"] if spec["tnn_name"] in declared else f"{spec['tnn_name']}__f32"
            args.append(f"{name}={raw}")
        res = run_tool(args, "TNN's runtime (tnn_run)", env=_env(self.path))
        index = work / "out" / "outputs.txt"
        if res.returncode != 0 or not index.is_file():
            raise _fail("TNN's runtime (tnn_run)", res)
        values = {}
        for line in index.read_text().splitlines():
            name, dtype, ndims, *rest = line.split()
            dims = [int(d) for d in rest[:int(ndims)]]
            values[name] = np.fromfile(work / "out" / rest[int(ndims)], dtype=np.dtype(dtype)).reshape(dims)
        return values

    def run(self, artifact, inputs):
        with private_temp_dir("tnn") as tmp:
            proto = _with_float_io(Path(artifact.files[0]), artifact, Path(tmp))
            by_blob = self._invoke(proto, artifact, inputs, Path(tmp))
        for name in [n for n in by_blob if n.endswith("__f32")]:
            by_blob[name[:-len("__f32")]] = by_blob.pop(name).astype(bool)
        out = {}
        for spec in artifact.meta["outputs"]:
            if spec["tnn_name"] not in by_blob:
                raise RuntimeRefused(f"TNN's runtime (tnn_run) produced no output '{spec['tnn_name']}'")
            out[spec["name"]] = by_blob[spec["tnn_name"]]
        return out

    def intermediates(self, artifact, inputs):
        """Every mapped blob as TNN computes it: the proto copied with all of them as outputs."""
        from .intermediates import by_onnx_name
        from .reader import read

        proto, weights = Path(artifact.files[0]), Path(artifact.files[1])
        mapping = artifact.meta.get("blob_map", {})
        net = read(proto, weights)
        records = _float_io_records(proto.read_text(encoding="utf-8"), artifact)
        fused = _fused_away(net.layers)
        wanted = [b for layer in net.layers for b in layer.outputs
                  if b in mapping and b not in fused and mapping[b].get("dtype") != "bool"]
        current = _records("\n".join(records))[3].split()
        outputs = list(dict.fromkeys([*current, *wanted]))
        records[3] = f'"{" ".join(outputs)} ,"'
        with private_temp_dir("tnn") as tmp:
            work = Path(tmp)
            copy = work / "exposed.tnnproto"
            copy.write_text("\n".join(records), encoding="utf-8")
            (work / "exposed.tnnmodel").symlink_to(weights.resolve())
            values = self._invoke(copy, artifact, inputs, work)
        for name in [n for n in values if n.endswith("__f32")]:
            values[name[:-len("__f32")]] = values.pop(name).astype(bool)
        return by_onnx_name(net, mapping, values)


def _records(text: str) -> list[str]:
    """The proto's records without their quotes and trailing " ,"."""
    return [line.strip()[1:-1].rstrip()[:-1].rstrip() for line in text.splitlines() if line.strip()]


def _float_io_records(text: str, artifact) -> list[str]:
    """The proto as quoted lines, with int8 (bool) inputs and outputs carried as float32 through
    Cast layers: ``tnn_run`` reads and writes float32/int32 raw files only (int8 blobs crash its
    blob converter), while the net between the Casts is the file as written."""
    recs = _records(text)
    blob_map = artifact.meta.get("blob_map", {})
    ins, extra_blobs, head, tail = [], [], [], []
    for spec in recs[1].split(":"):
        tokens = spec.split()
        if tokens and tokens[-1] == "2":  # DATA_TYPE_INT8
            name = tokens[0]
            ins.append(" ".join([f"{name}__f32", *tokens[1:-1], "0"]))
            extra_blobs.append(f"{name}__f32")
            head.append(f"Cast {name}__cast_in 1 1 {name}__f32 {name} 2")
        else:
            ins.append(" ".join(tokens))
    outs = []
    for name in recs[3].split():
        if blob_map.get(name, {}).get("dtype") == "bool":
            outs.append(f"{name}__f32")
            extra_blobs.append(f"{name}__f32")
            tail.append(f"Cast {name}__cast_out 1 1 {name} {name}__f32 0")
        else:
            outs.append(name)
    if not (head or tail):
        return text.split("\n")
    layers = recs[5:]
    new = [recs[0], " : ".join(ins), " " + " ".join(recs[2].split() + extra_blobs), " ".join(outs),
           f" {len(layers) + len(head) + len(tail)}", *head, *layers, *tail]
    return [f'"{r} ,"' for r in new]


def _with_float_io(proto: Path, artifact, work: Path) -> Path:
    records = _float_io_records(proto.read_text(encoding="utf-8"), artifact)
    text = "\n".join(records)
    if text == proto.read_text(encoding="utf-8"):
        return proto
    copy = work / "io.tnnproto"
    copy.write_text(text, encoding="utf-8")
    (work / "io.tnnmodel").symlink_to(Path(artifact.files[1]).resolve())
    return copy


def _fused_away(layers) -> set[str]:
    """Blobs TNN's optimizer leaves without a writer: exposing one as an output would crash the
    runtime, and it is fused away anyway.  The activations conv_fusion.py models exactly; an int8
    1x1 convolution also swallows an Add reading it (net_optimizer_fuse_conv_add.cc#L56-L157),
    kept out conservatively."""
    from .conv_fusion import CONV_PARAM_TYPES, dropped_blobs, view
    from .layer_types import LAYER_TYPE

    start = 4  # type name n_in n_out, then the blobs, then the parameters
    views = [view(layer.type_str, layer.inputs, layer.outputs,
                  layer.fields.tokens[start + len(layer.inputs) + len(layer.outputs):]) for layer in layers]
    gone = dropped_blobs(views)
    for prev, cur in zip(views, views[1:]):
        if prev.type in CONV_PARAM_TYPES and cur.type == LAYER_TYPE["Add"] and prev.outputs[0] in cur.inputs:
            gone.add(prev.outputs[0])
    return gone


class TnnTest(RealRuntime):
    framework = "tnn"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.title = "TNN x86 runtime (TNNTest, 6-decimal text output)"

    def oracle_name(self, hw: str) -> str:
        return oracle_for(self.title, hw)

    def run(self, artifact, inputs):
        specs = artifact.meta["inputs"]
        if len(specs) != 1:
            raise RuntimeRefused("TNNTest feeds one input file to every input; this model has "
                                 f"{len(specs)} inputs: use tnn_run")
        with private_temp_dir("tnn") as tmp:
            work = Path(tmp)
            np.savetxt(work / "in.txt", np.asarray(inputs[specs[0]["name"]], np.float32).reshape(-1), fmt="%.9g")
            args = [str(self.path), "-mt", "TNN", "-mp", str(artifact.files[0]), "-dt", device_for(artifact.hw),
                    "-pr", "HIGH", "-ip", str(work / "in.txt"), "-op", str(work / "out.txt")]
            res = run_tool(args, "TNN's runtime (TNNTest)", env=_env(self.path))
            out_file = work / "out.txt"
            if res.returncode != 0 or not out_file.is_file():
                raise _fail("TNN's runtime (TNNTest)", res)
            lines = out_file.read_text().split("\n")
        count = int(lines[0])
        heads, pos, by_blob = lines[1:1 + count], 1 + count, {}
        for head in heads:  # "<name> mat_type: T dims: k d0 d1 ..."
            tokens = head.split()
            ndims = int(tokens[tokens.index("dims:") + 1])
            dims = [int(d) for d in tokens[tokens.index("dims:") + 2:][:ndims]]
            n = int(np.prod(dims)) if dims else 1
            by_blob[tokens[0]] = np.array([float(v) for v in lines[pos:pos + n]], np.float32).reshape(dims)
            pos += n
        return {spec["name"]: by_blob[spec["tnn_name"]] for spec in artifact.meta["outputs"]}
