"""The MACE target: ``<name>.pb`` (MultiNetDef), ``<name>.data`` (weights) and ``<name>.yml``
(deployment file) for MACE's cpu, gpu, dsp and apu runtimes.

MACE's runtime does not install from a registry, so :meth:`MaceTarget.run` executes the files
through :mod:`.reader` (MACE's CPU semantics re-expressed in ONNX) on onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ...infra.fsutil import atomic_output_dir, sha256_bytes
from ..base import FP16_TOLERANCE, Artifact, ExportOptions, Target
from ..naming import NameRule
from .registry import OPS

#: File names of the .pb/.data/.yml trio: letters, digits, '-' and '_' (MACE's tools/ build the
#: file names into shell commands and generated C++).
FILE_NAME = NameRule(r"[^\w-]")


class MaceTarget(Target):
    name = "mace"
    custom_module = "converter.targets.mace.custom"
    title = OPS.title
    executor = "mace-reader+onnxruntime"
    runtime_env = "EDGECONV_MACE_RUNTIME"

    def executor_oracle(self, executor: str):
        from ...runtimes.base import READER, Oracle, package_version

        return Oracle(f"edgeconv MACE reader (onnxruntime {package_version('onnxruntime')})", READER)

    def load_runtime(self, path):
        from .runtime import mace_runtime

        return mace_runtime(path)
    ops_module = "converter.targets.mace.ops"
    hardware = ("cpu", "gpu", "dsp", "apu")
    default_hw = "cpu"
    #: --quantize modes written natively (besides fp16): uint8 ops on the CPU (quantized.py) and
    #: Hexagon NN nodes on the DSP (hexagon.py).
    quantized_modes = ("uint8", "fp16")

    def weight_integers(self, mode: str, hw: str):
        """The CPU's uint8 file quantizes each convolution's float weights itself, per tensor
        (quantized.py ``quantize_weights``, MACE's ``quantize_util.quantize(non_zero=True)``):
        the QDQ model takes these integers, so its bias correction holds for the file.  (The
        DSP's Hexagon nodes have their own requantization, hexagon.py: no correction there.)"""
        if mode != "uint8" or hw != "cpu":
            return None
        from .quantized import quantize_weights

        def integers(weight: np.ndarray):
            q, info = quantize_weights(weight)
            return q, info.scale, info.zero_point

        return integers

    def keeps_float_layers(self, mode: str) -> bool:
        """Not in a uint8 net: MACE lays its tensors out NHWC, and a float Conv/Pool left among
        them would read them as NCHW (quantized.py refuses such a net), so ``auto`` keeps no
        layer float for MACE uint8."""
        return mode != "uint8"

    def export(self, model: onnx.ModelProto, out_dir: Path, hw: str,
               options: ExportOptions | None = None) -> Artifact:
        from . import deploy_yaml, netdef_writer

        options = options or ExportOptions()
        self.check_hw(hw)
        out_dir = Path(out_dir)
        name = options.name or (model.graph.name or "model")
        name = FILE_NAME(name)
        quantization = (options.quantization or {}).get("params")
        pb, data, inputs, outputs, meta = netdef_writer.build(model, hw, name, options.fp16_weights, quantization)
        files = {f"{name}.pb": pb, f"{name}.data": data}
        yml = deploy_yaml.render(name, hw, f"{name}.pb", sha256_bytes(pb), f"{name}.data",
                                 sha256_bytes(data), inputs, outputs, options.fp16_weights,
                                 fallback=bool(options.fallback_nodes), quantize=quantization is not None)
        files[f"{name}.yml"] = yml.encode()
        with atomic_output_dir(out_dir) as tmp:
            for file_name, content in files.items():
                (tmp / file_name).write_bytes(content)
        meta.update(name=name, inputs=[vars(i) for i in inputs], outputs=[vars(o) for o in outputs])
        if meta.get("compute_precision") == "fp16":
            meta["suggested_tolerance"] = FP16_TOLERANCE
        return Artifact(target=self.name, hw=hw, files=[out_dir / f for f in files], out_dir=out_dir,
                        meta=meta, runtime="mace-reader+onnxruntime")

    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Feed NCHW arrays as a MaceTensor with data_format NCHW would be: transposed to the
        model's NHWC ``input_info`` (and outputs back), then execute through the reader."""
        from .intermediates import feeds
        from ...infra.limits import guarded_run  # --timeout and Ctrl-C stop it like every other run
        from ...runtimes.onnxruntime import session
        from .reader import read

        name = artifact.meta["name"]
        model = read(artifact.out_dir / f"{name}.pb", artifact.out_dir / f"{name}.data")
        # Graph optimizations off (the integer graph runs node by node as the reader wrote it);
        # its ConvIntegers are uint8 x uint8, which onnxruntime accumulates exactly on every CPU.
        results = guarded_run(session(model, threads=1), None, feeds(artifact, inputs),
                              "the MACE reader's onnxruntime run")
        outs = {}
        for info, value in zip(artifact.meta["outputs"], results):
            value = value.transpose(0, 3, 1, 2) if info["data_format"] == 1 else value
            # int64 / bool ONNX outputs are int32 in MACE; hand them back in the ONNX dtype.
            outs[info["name"]] = value.astype(info.get("onnx_dtype") or value.dtype, copy=False)
        artifact.runtime = "mace-reader+onnxruntime"
        return outs

    def intermediates(self, artifact: Artifact, inputs: dict[str, np.ndarray]):
        """Every op output the reader computes, by legalized ONNX name (see ``intermediates.py``)."""
        from .intermediates import intermediates

        if artifact.meta.get("uint8"):
            from ...runtimes import ReaderCannotRun

            # uint8 tensors are NHWC integers with their own scales: no per-layer float map yet
            raise ReaderCannotRun("the MACE reader does not expose the tensors of a uint8 net")
        return intermediates(artifact, inputs)

    def integer_file_caveat(self, artifact: Artifact, oracle) -> str | None:
        """Why a uint8 file judged by ``oracle`` is still not verified (None: it is): edgeconv's
        reader alone ran it (MACE's integer kernels re-expressed by the same hands that wrote the
        file), no MACE runtime."""
        from ...runtimes import READER

        if not artifact.meta.get("uint8") or oracle.kind != READER:
            return None
        if artifact.hw == "dsp":
            return ("no DSP runtime exists here: edgeconv's reader re-expresses the Hexagon NN nodes "
                    "(hexagon_nn's quantized ops: 8x8->32 convolutions requantized by min/max ranges), and "
                    "MACE runs the file only on a Qualcomm Hexagon DSP (libhexagon_nn_skel.so); run it with "
                    "mace_run --device=HEXAGON on a device to verify it")
        return ("no MACE runtime ran it: edgeconv's reader re-expresses MACE's uint8 CPU kernels (gemmlowp "
                "fixed-point requantization); give --runtime mace=PATH (a mace_run built with "
                "MACE_ENABLE_QUANTIZE=ON) to have MACE judge it")


TARGET = MaceTarget()
