"""Helpers for the TNN tests: tiny ONNX models and an independent .tnnproto/.tnnmodel decoder.

The decoder here is deliberately separate from ``converter/targets/tnn/reader.py``: it only
splits records/tokens and unpacks bytes, following Tencent/TNN model_interpreter.cc and
objseri.h, so the tests can check raw field positions without the reader's semantics.
"""

from __future__ import annotations

import struct

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MAGIC_V2 = 0xFABC0004


def single_node_model(op: str, inputs: dict[str, tuple], attrs: dict | None = None,
                      initializers: dict[str, np.ndarray] | None = None, n_outputs: int = 1,
                      input_order: list[str] | None = None, domain_opset: int = 17,
                      out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """One ``op`` node; ``inputs`` are graph inputs (float32, given shapes), ``initializers`` constants.
    ``input_order`` lists the node's operands (names from both dicts; "" for an omitted one)."""
    initializers = initializers or {}
    order = input_order or [*inputs, *initializers]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, order, outs, name=f"{op.lower()}_node", **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, out_type, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", domain_opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def proto_records(text: str) -> list[str]:
    """model_interpreter.cc:183-200: drop every '"' and newline, split on ','."""
    return [r.strip() for r in text.replace('"', "").replace("\n", "").split(",")]


def layer_tokens(text: str) -> list[list[str]]:
    return [r.split() for r in proto_records(text)[5:] if r]


def layer_params(tokens: list[str]) -> list[str]:
    """Tokens after ``type name n_in n_out inputs.. outputs..`` (InterpretLayer, :315-398)."""
    n_in, n_out = int(tokens[2]), int(tokens[3])
    return tokens[4 + n_in + n_out:]


class Bytes:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def i32(self) -> int:
        (value,) = struct.unpack_from("<i", self.data, self.pos)
        self.pos += 4
        return value

    def u32(self) -> int:
        (value,) = struct.unpack_from("<I", self.data, self.pos)
        self.pos += 4
        return value

    def string(self) -> str:
        n = self.i32()
        text = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return text

    def raw(self) -> tuple[int, list[int], bytes]:
        """objseri.h GetRaw: magic, data_type, byte length, [ndims, dims], bytes."""
        assert self.u32() == MAGIC_V2
        data_type, length = self.i32(), self.i32()
        if length <= 0:
            return data_type, [], b""
        dims = [self.i32() for _ in range(self.i32())]
        payload = self.data[self.pos:self.pos + length]
        self.pos += length
        return data_type, dims, payload
