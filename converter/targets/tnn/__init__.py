"""The TNN target: ``<name>.tnnproto`` + ``<name>.tnnmodel`` as TNN's interpreter reads them.

``export`` writes a legalized, normalized ONNX model as TNN layers (``emit.py`` and the
``layers*.py`` converters; ``proto_writer.py``/``model_writer.py`` serialize).  TNN's runtime is
not installable from a registry, so ``run`` executes the written files through an independent
reader (``reader.py``: TNN's parser semantics -> ONNX) on onnxruntime.

``ExportOptions.name`` (file stem, default ``model``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from ...infra.fsutil import atomic_output_dir
from ..base import FP16_TOLERANCE, Artifact, ExportOptions, Target
from .registry import OPS

#: TNN devices (the columns of TNN's doc/en/user/support_en.md device table), named as in
#: op_support_matrix.yaml.
HARDWARE = ("arm", "x86", "opencl", "metal", "huawei_npu", "cuda", "openvino", "rknpu", "apple_npu", "naive")

RUNTIME = "tnn-reader+onnxruntime"

#: Hardware whose TNN runtime computes in half precision as configured by default, so a file for
#: it is judged with half-precision tolerances: OpenCL under the default ``PRECISION_AUTO``
#: ("OPENCL: prefer fp16", Tencent/TNN@f0cb081:include/tnn/core/common.h#L67-L88; every blob
#: becomes DATA_TYPE_HALF unless PRECISION_HIGH, source/tnn/device/opencl/acc/opencl_layer_acc.cc#L40-L46,
#: on any GPU with cl_khr_fp16, opencl_runtime.cc#L286-L288), Metal at every precision (common.h).
HALF_PRECISION_HW = ("opencl", "metal")


class TnnTarget(Target):
    name = "tnn"
    custom_module = "converter.targets.tnn.custom"

    def custom_layer_name(self, op) -> str:
        from .custom import layer_name

        return layer_name(op)
    title = OPS.title
    executor = RUNTIME
    runtime_env = "EDGECONV_TNN_RUNTIME"

    def executor_oracle(self, executor: str):
        from ...runtimes.base import READER, Oracle, package_version

        return Oracle(f"edgeconv TNN reader (onnxruntime {package_version('onnxruntime')})", READER)

    def load_runtime(self, path):
        from .runtime import tnn_runtime

        return tnn_runtime(path)
    ops_module = "converter.targets.tnn.emit"
    hardware = HARDWARE
    default_hw = "arm"
    #: --quantize modes written natively (besides fp16): Quantized* layers, see quantized.py.
    quantized_modes = ("int8", "fp16")

    def carries_qdq_weight_integers(self, per_channel: bool) -> bool:
        """TNN's tool quantizes Convolution / InnerProduct weights per output channel,
        symmetric, ``max|w| / 127`` (quantized.py ``_weights``): the QDQ model's per-channel int8
        integers (rounding half away from zero where onnxruntime rounds half to even: only exact
        ties differ), so a bias correction for them holds for the file; per-tensor QDQ weights
        are not the file's."""
        return per_channel

    def export(self, model: onnx.ModelProto, out_dir: Path, hw: str, options: ExportOptions | None = None) -> Artifact:
        from .context import sanitize
        from .conv_fusion import keep_fusions_exact
        from .emit import build_net
        from .intermediates import blob_map
        from .model_writer import model_bytes
        from .proto_writer import proto_text

        options = options or ExportOptions()
        self.check_hw(hw)
        stem = sanitize(str(options.name or "model"))
        net, blob_names = build_net(model, fp16_weights=options.fp16_weights)
        int8 = None
        if options.quantization is not None:
            from .quantized import quantize_net

            int8 = quantize_net(net, blob_names, options.quantization["params"])
        # last, on the final layer list: TNN's runtime fuses neighbours by position (conv_fusion.py)
        keep_fusions_exact(net)
        proto, weights = proto_text(net), model_bytes(net)
        out_dir = Path(out_dir)
        files = [out_dir / f"{stem}.tnnproto", out_dir / f"{stem}.tnnmodel"]
        # Both files appear together or not at all.
        with atomic_output_dir(out_dir) as tmp:
            (tmp / files[0].name).write_text(proto, encoding="utf-8")
            (tmp / files[1].name).write_bytes(weights)
        graph = model.graph
        initializers = {t.name for t in graph.initializer}
        meta = {
            "inputs": [{"name": i.name, "tnn_name": blob_names[i.name],
                        "shape": [d.dim_value for d in i.type.tensor_type.shape.dim]}
                       for i in graph.input if i.name not in initializers],
            "outputs": [{"name": o.name, "tnn_name": blob_names[o.name]} for o in graph.output],
            "layer_types": dict(sorted(Counter(layer.type for layer in net.layers).items())),
            "layer_count": len(net.layers),
            "fp16_weights": bool(options.fp16_weights),
            "compute_precision": "fp16" if hw in HALF_PRECISION_HW else "fp32",
            "int8": int8,
            # which ONNX tensor each blob holds, for per-layer verification
            "blob_map": blob_map(model, net, blob_names),
        }
        if hw in HALF_PRECISION_HW:
            meta["suggested_tolerance"] = FP16_TOLERANCE
        return Artifact(target=self.name, hw=hw, files=files, out_dir=out_dir, meta=meta, runtime=RUNTIME)

    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from ...infra.limits import guarded_run  # --timeout and Ctrl-C stop it like every other run
        from ...runtimes.onnxruntime import session
        from .intermediates import feeds
        from .reader_onnx import load_as_onnx

        model = load_as_onnx(artifact.files[0], artifact.files[1])
        # Graph optimizations off: an int8 net's Q/DQ pairs stay as the reader wrote them, never
        # fused into onnxruntime's QLinearConv, whose x86 kernels without VNNI saturate 16-bit
        # pair sums (the verdict would depend on the host CPU).
        names = [o["tnn_name"] for o in artifact.meta["outputs"]]
        values = guarded_run(session(model), names, feeds(model, artifact, inputs), "the TNN reader's onnxruntime run")
        artifact.runtime = RUNTIME
        return {o["name"]: v for o, v in zip(artifact.meta["outputs"], values)}

    def intermediates(self, artifact: Artifact, inputs: dict[str, np.ndarray]):
        """Every blob the reader computes, by legalized ONNX name (see ``intermediates.py``)."""
        from .intermediates import intermediates

        return intermediates(artifact, inputs)


TARGET = TnnTarget()
