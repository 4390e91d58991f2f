"""The MACE deployment file (``<name>.yml``) that MACE's tools read.

Keys and values follow ``tools/python/utils/config_parser.py`` (``ModelKeys``, ``DEVICE_MAP``:
cpu, gpu, dsp, apu; ``parse_internal_data_type``: fp32_fp32 / fp16_fp32) and the ONNX demo in
``docs/user_guide/models/demo_models_onnx.yml``.  ``model_file_path`` / ``weight_file_path``
name the files we wrote, with sha256 checksums that ``config_parser.normalize_graph_config``
verifies (``download_or_get_model``).  Shapes are given in the ONNX (NCHW) order with
``input_data_formats: NCHW``; ``convert.py:175-193`` turns such 4-D shapes into the NHWC
``input_info`` that our ``.pb`` carries.
"""

from __future__ import annotations

import yaml

#: config_parser.DEVICE_MAP key for each hardware column.
RUNTIME_WORD = {"cpu": "cpu", "gpu": "gpu", "dsp": "dsp", "apu": "apu"}


def _shape(dims) -> str:
    return ",".join(str(int(d)) for d in dims)


def _format(info) -> str:
    return "NCHW" if len(info.shape) == 4 else "NONE"


def render(name: str, hw: str, pb_file: str, pb_sha256: str, data_file: str, data_sha256: str,
           inputs, outputs, fp16_weights: bool, fallback: bool = False, quantize: bool = False) -> str:
    """``fallback``: some nodes are left to the CPU (a ``cpu+gpu`` runtime, which MACE's
    ``demo_models_onnx.yml`` documents beside ``cpu`` and ``gpu``)."""
    graph = {
        "input_tensors": [i.name for i in inputs],
        "input_shapes": [_shape(i.shape) for i in inputs],
        "input_data_types": [i.dtype for i in inputs],
        "input_data_formats": [_format(i) for i in inputs],
        "output_tensors": [o.name for o in outputs],
        "output_shapes": [_shape(o.shape) for o in outputs],
        "output_data_types": [o.dtype for o in outputs],
        "output_data_formats": [_format(o) for o in outputs],
    }
    model = {
        "platform": "onnx",
        "model_file_path": pb_file,
        "model_sha256_checksum": pb_sha256,
        "weight_file_path": data_file,
        "weight_sha256_checksum": data_sha256,
        "subgraphs": [graph],
        "runtime": "cpu+gpu" if fallback and hw == "gpu" else RUNTIME_WORD[hw],
        "data_type": "fp16_fp32" if fp16_weights else "fp32_fp32",
        "winograd": 0,
    }
    if hw in ("dsp", "apu") or quantize:
        # Hexagon and APU run quantized models only (hexagon_converter.py, apu_converter.py); a
        # uint8 CPU net is the converter's quantize path too.
        model["quantize"] = 1
    doc = {
        "library_name": name,
        "target_abis": ["arm64-v8a"],
        "model_graph_format": "file",
        "model_data_format": "file",
        "models": {name: model},
    }
    header = (f"# MACE deployment file written by edgeconv for '{name}' on {hw}.\n"
              f"# {pb_file} / {data_file} are already converted (MultiNetDef + weights);\n"
              f"# run them with mace_run --model_file={pb_file} --model_data_file={data_file}.\n")
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
