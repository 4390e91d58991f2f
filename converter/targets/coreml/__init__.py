"""CoreML target: legalized ONNX -> an ML Program ``.mlpackage`` (coremltools' MIL builder).

* Minimum deployment target: **iOS 16 / macOS 13** (Core ML spec 7).  ML Programs need iOS 15,
  but the Neural-Engine-without-GPU compute unit (``CPU_AND_NE``) that ``--hw ane`` selects
  exists only from iOS 16 / macOS 13, and one target for all hardware keeps the files identical
  in format across ``--hw``.
* Hardware -> compute units: ``cpu`` -> ``CPU_ONLY``, ``gpu`` -> ``CPU_AND_GPU``, ``ane`` ->
  ``CPU_AND_NE``.  Compute units are chosen when a model is loaded, not stored in the spec, so
  they are recorded in the model's metadata and in ``artifact.meta``.
* Precision: the Neural Engine computes in fp16 only, so ``--hw ane`` defaults to fp16 compute
  precision (fp16 weights, fp32 model I/O with casts at the ends); cpu/gpu default to fp32.
  Override with ``ExportOptions.compute_precision = "fp16" | "fp32"``;
  ``ExportOptions.fp16_weights`` also selects fp16.
* ``run`` uses ``MLModel.predict`` on macOS (``artifact.runtime == "coreml"``); elsewhere it
  executes the saved program op by op in numpy (``"mil-numpy"``, see ``mil_executor``).

Options in ``ExportOptions.name`` (package file stem, default the ONNX graph name),
``source_sha256`` (hash of the user's source file, default the hash of the ONNX model given),
``compute_precision``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path

import numpy as np
import onnx

from ... import __version__
from ...errors import BadInput, EdgeconvError, Unsupported
from ...infra.fsutil import sha256_bytes
from ..base import FP16_TOLERANCE, Artifact, ExportOptions, Target
from ...runtimes.base import INT32_LIMIT, integer_feed
from .mil_builder import sanitize
from .mil_registry import OPS

#: Held while coremltools builds or loads a MIL program (see ``CoreMLTarget.export``).
MIL_LOCK = threading.RLock()
COMPUTE_UNITS = {"cpu": "CPU_ONLY", "gpu": "CPU_AND_GPU", "ane": "CPU_AND_NE"}
MINIMUM_DEPLOYMENT_TARGET = "iOS16"
#: Set to "1" to force the numpy executor even on macOS (to compare both).
FORCE_NUMPY_ENV = "EDGECONV_COREML_NUMPY"
FP32_TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}


def _precision(hw: str, options: ExportOptions) -> str:
    chosen = options.compute_precision
    if chosen is None:
        return "fp16" if hw == "ane" or options.fp16_weights else "fp32"
    if chosen not in ("fp16", "fp32"):
        raise BadInput(f"compute_precision must be fp16 or fp32, got '{chosen}'")
    if hw == "ane" and chosen == "fp32":
        raise BadInput("the Neural Engine computes in fp16 only; use --hw cpu/gpu for fp32")
    return chosen


class CoreMLTarget(Target):
    name = "coreml"
    custom_module = "converter.targets.coreml.custom"
    title = OPS.title

    executors = ("mil-numpy", "coreml")

    def executor_name(self) -> str:
        return _runtime_name()

    def executor_oracle(self, executor: str):
        from ...runtimes.base import READER, Oracle, package_version

        if executor == "coreml":
            return Oracle(f"CoreML runtime (coremltools {package_version('coremltools')})")
        return Oracle("CoreML MIL executor (no device)", READER)
    ops_module = "converter.targets.coreml.mil_mappings"
    hardware = ("cpu", "gpu", "ane")
    default_hw = "cpu"
    #: ML Programs have no custom layers (Apple supports them only in the older NeuralNetwork
    #: format); the custom/ scaffold explains the composite-op path instead.
    custom_layers = False
    #: --quantize modes written natively (besides fp16 compute precision): int8 weights as
    #: constexpr_affine_dequantize (quantized.py).
    quantized_modes = ("int8-weights", "fp16")

    def preload(self) -> None:
        from . import mil_executor, package_writer  # noqa: F401 - imported early, see Target.preload
        from .quiet import coremltools

        coremltools()
        import coremltools.converters.mil.mil.passes.pass_pipeline  # noqa: F401

    def export(self, model: onnx.ModelProto, out_dir: Path, hw: str,
               options: ExportOptions | None = None) -> Artifact:
        # coremltools' builder keeps the block being built, and its symbol counters, in module
        # globals: one program at a time (ports in threads, port -j, take turns here).
        with MIL_LOCK:
            return self._export(model, out_dir, hw, options)

    def _export(self, model: onnx.ModelProto, out_dir: Path, hw: str,
                options: ExportOptions | None = None) -> Artifact:
        from .intermediates import mil_names
        from .mil_builder import build_program
        from .quiet import coremltools

        options = options or ExportOptions()
        self.check_hw(hw)
        precision = _precision(hw, options)
        ct = coremltools()
        target = getattr(ct.target, MINIMUM_DEPLOYMENT_TARGET)
        # The builder numbers the consts it names (conv_0_weight_0) from class-level counters that
        # coremltools resets only after a conversion succeeds: after a refused program, the next
        # one would be named conv_0_weight_1 -- different bytes for the same model.
        from coremltools.converters.mil import converter as mil_converter

        mil_converter._reset_conversion_state()
        built = build_program(model, target)
        compressed = _compress_weights(built.program, options.quantization)
        mlmodel = _convert_program(ct, built.program, target, hw, precision)

        name = sanitize(str(options.name or model.graph.name or "model"))
        source_sha = options.source_sha256 or sha256_bytes(
            model.SerializeToString(deterministic=True))
        io = {"inputs": [s.to_json() for s in built.inputs],
              "outputs": [s.to_json() for s in built.outputs]}
        out_dir = Path(out_dir)
        package = out_dir / f"{name}.mlpackage"
        files = _write_package(package, mlmodel, built, io, hw, precision, source_sha)
        return Artifact(
            target=self.name, hw=hw, files=files, out_dir=out_dir,
            meta={
                "package": package.name,
                "compute_units": COMPUTE_UNITS[hw],
                "compute_precision": precision,
                "int8_weights": compressed,
                "minimum_deployment_target": MINIMUM_DEPLOYMENT_TARGET,
                "source_sha256": source_sha,
                "onnx_ops": built.onnx_ops,
                # which ONNX tensor each MIL var computes, for per-layer verification
                "mil_names": mil_names(model, built.tensor_names),
                # Element-wise |got - ref| <= atol + rtol*|ref| the verifier should use for this
                # program (fp16 rounds after every op; see tests/test_coreml_target.py).
                "suggested_tolerance": FP16_TOLERANCE if precision == "fp16" else FP32_TOLERANCE,
                **io,
            },
            runtime=_runtime_name(),
        )

    def run(self, artifact: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        package = Path(artifact.out_dir) / artifact.meta["package"]
        feeds = {}
        for spec in artifact.meta["inputs"]:
            value = inputs.get(spec["onnx_name"], inputs.get(spec["name"]))
            if value is None:
                raise BadInput(f"missing input '{spec['onnx_name']}'")
            # The model's interface holds int32 for integer tensors and fp32 for the rest
            # (mil_builder.IO_DTYPES).
            value = integer_feed(value, spec["onnx_name"], np.int32 if "int" in spec["dtype"] else np.float32,
                                 INT32_LIMIT, "CoreML (an ML Program has no 64-bit integers)")
            if tuple(value.shape) != tuple(spec["shape"]):
                raise BadInput(f"input '{spec['onnx_name']}' has shape {list(value.shape)}, "
                               f"the model expects {spec['shape']}")
            feeds[spec["name"]] = value
        artifact.runtime = _runtime_name()
        if artifact.runtime == "coreml":
            results = _predict_coreml(package, feeds, artifact.meta["compute_units"])
        else:
            from .mil_executor import run_package

            with MIL_LOCK:  # loading the program builds pymil blocks (global state)
                results = run_package(package, feeds)
        return {spec["onnx_name"]: np.asarray(results[spec["name"]]).astype(spec["dtype"])
                for spec in artifact.meta["outputs"]}

    def intermediates(self, artifact: Artifact, inputs: dict[str, np.ndarray]):
        """Every MIL var of the saved program, by legalized ONNX name (see ``intermediates.py``).
        Core ML's predict exposes only outputs, so this always uses the numpy executor."""
        from .intermediates import intermediates

        with MIL_LOCK:
            return intermediates(artifact, inputs)


def _compress_weights(program, quant: dict | None):
    """``--quantize int8-weights``: the program's weights as int8 constexprs (what was done),
    else None."""
    if quant is not None and quant.get("mode") == "int8-weights":
        from .quantized import compress_weights

        return compress_weights(program, bool(quant["params"].get("per_channel", True)))
    return None


def _convert_program(ct, program, target, hw: str, precision: str):
    """coremltools' ML Program conversion of ``program`` (an ``MLModel``, not loaded); its
    refusals are Unsupported."""
    from .quiet import silenced

    # coremltools re-validates the whole program after each of its ~100 passes (half the
    # conversion time of a ResNet-18); validate it once, after the last pass, instead.
    validate = type(program).validate
    program.validate = lambda *args, **kwargs: None

    try:
        with silenced(), _no_upstream_constexpr_tracking(program):
            mlmodel = ct.convert(
                program, convert_to="mlprogram", minimum_deployment_target=target,
                compute_precision=ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32,
                compute_units=getattr(ct.ComputeUnit, COMPUTE_UNITS[hw]), skip_model_load=True,
            )
        del program.validate
        validate(program, check_essential_scope=True)
    except EdgeconvError:
        raise
    except (ValueError, TypeError, NotImplementedError) as err:  # coremltools' own refusals
        raise Unsupported(f"coremltools rejected the program: {str(err).splitlines()[0]}") from None
    return mlmodel


def _write_package(package: Path, mlmodel, built, io: dict, hw: str, precision: str, source_sha: str) -> list:
    """Write ``mlmodel`` as ``package`` (an ``.mlpackage``) with edgeconv's metadata and feature
    descriptions; the files written."""
    from .package_writer import serialize_spec, write_mlpackage

    metadata = {
        "edgeconv.version": __version__,
        "edgeconv.source_sha256": source_sha,
        "edgeconv.hardware": hw,
        "edgeconv.compute_units": COMPUTE_UNITS[hw],
        "edgeconv.compute_precision": precision,
        "edgeconv.minimum_deployment_target": MINIMUM_DEPLOYMENT_TARGET,
        "edgeconv.inputs": json.dumps(io["inputs"], sort_keys=True),
        "edgeconv.outputs": json.dumps(io["outputs"], sort_keys=True),
    }
    features = {s.name: f"ONNX tensor '{s.onnx_name}', {s.dtype} {list(s.shape)}"
                for s in built.inputs + built.outputs}
    model_bytes = serialize_spec(
        mlmodel.get_spec(), metadata,
        f"Converted by edgeconv {__version__} from ONNX (sha256 {source_sha[:16]}...) for {hw}",
        features,
    )
    weights = Path(mlmodel.weights_dir) if mlmodel.weights_dir else None
    return write_mlpackage(package, model_bytes, weights)


@contextlib.contextmanager
def _no_upstream_constexpr_tracking(program):
    """coremltools re-derives, on leaving every block of every pass (~100 times), which
    ``constexpr_*`` (compressed-weight) op outputs each var depends on, so as not to fold them
    away; a program without such ops (edgeconv writes none) gets empty sets each time: a whole
    graph walk per pass (a third of the conversion of a ResNet-18) for nothing.  Skipped while
    converting such a program (under ``MIL_LOCK``: no other coremltools work runs meanwhile)."""
    from coremltools.converters.mil.mil.block import Block

    def ops(block):
        for op in block.operations:
            yield op
            for inner in op.blocks:
                yield from ops(inner)

    if any(op.op_type.startswith("constexpr_") for f in program.functions.values() for op in ops(f)):
        yield
        return
    saved = Block.__dict__["_propagate_nonreplaceable_vars"]
    Block._propagate_nonreplaceable_vars = lambda self: None
    try:
        yield
    finally:
        Block._propagate_nonreplaceable_vars = saved


def _runtime_name() -> str:
    return "coreml" if sys.platform == "darwin" and os.environ.get(FORCE_NUMPY_ENV) != "1" else "mil-numpy"


def _predict_coreml(package: Path, feeds: dict[str, np.ndarray], compute_units: str):
    from .quiet import coremltools

    ct = coremltools()
    model = ct.models.MLModel(str(package), compute_units=getattr(ct.ComputeUnit, compute_units))
    return model.predict(feeds)


TARGET = CoreMLTarget()
