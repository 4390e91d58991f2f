"""Walk a legalized ONNX graph (onnx-graphsurgeon) and emit TFLite builtin ops into a ModelWriter.

The state is one table: for each ONNX tensor, the TFLite tensors that hold it, keyed by layout
(see ``layout.py``).  The first one written is the tensor's *home* layout; other layouts are made
on demand by :meth:`Lowering.get` (RESHAPE when only size-1 axes move, else TRANSPOSE) and cached,
so a tensor is converted at most once per layout.  Constants have no home: :meth:`get` writes
them directly in the layout asked for (weights are transposed at export time, never at run time).
"""

from __future__ import annotations

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import constant_value, static_shape
from ..driver import NodeContext
from . import layout as L
from ._generated import schema_generated as fb
from .registry import OPS
from .writer import ModelWriter


class Lowering(NodeContext):
    title = OPS.title

    def __init__(self, writer: ModelWriter):
        self.w = writer
        self._forms: dict[str, dict[tuple, int]] = {}
        self._home: dict[str, tuple] = {}
        self._shape: dict[str, tuple[int, ...]] = {}
        self.node: gs.Node | None = None  # the node being lowered, for error messages
        #: CUSTOM ops written so far: first output name -> (custom_code, options), see custom.py
        self.customs: dict[str, tuple[str, bytes]] = {}
        #: Softmax and reductions over a short innermost axis run where it is strided
        #: (``layout.strided_layout``); float CPU files only (see ``convert``).
        self.short_axis_layouts = True
        #: Names of the graph outputs (their stored layout decides the file's interface).
        self.graph_outputs: frozenset[str] = frozenset()

    # -- facts about ONNX tensors ---------------------------------------------------------
    def shape(self, t: gs.Tensor) -> tuple[int, ...]:
        if t.name in self._shape:
            return self._shape[t.name]
        value = constant_value(t)
        shape = value.shape if value is not None else static_shape(t)
        if shape is None:
            raise self.unsupported(f"tensor '{t.name}' has no static shape (fix input shapes first)")
        return tuple(int(d) for d in shape)

    def rank(self, t: gs.Tensor) -> int:
        return len(self.shape(t))

    @staticmethod
    def const(t: gs.Tensor | None) -> np.ndarray | None:
        if t is None or (isinstance(t, gs.Variable) and t.name == ""):
            return None
        return constant_value(t)

    def home(self, t: gs.Tensor) -> tuple | None:
        """The layout ``t`` was written in (None for constants)."""
        return self._home.get(t.name)

    def written(self) -> dict[str, dict[tuple, int]]:
        """ONNX tensor name -> {layout: TFLite tensor index} of everything written so far."""
        return self._forms

    def home_layout(self, name: str) -> tuple | None:
        return self._home.get(name)

    def set_home(self, t: gs.Tensor, perm) -> None:
        """Make an already written layout of ``t`` the one later ops start from."""
        assert tuple(perm) in self._forms[t.name]
        self._home[t.name] = tuple(perm)

    # -- writing ---------------------------------------------------------------------------
    def define(self, t: gs.Tensor, perm, dtype=None) -> int:
        """Create the TFLite tensor that holds ONNX tensor ``t`` in layout ``perm``."""
        perm = tuple(perm)
        shape = self.shape(t)
        dtype = np.dtype(dtype or _np_dtype(t))
        index = self.w.tensor(t.name, L.stored_shape(shape, perm), dtype)
        self.bind(t, perm, index)
        return index

    def bind(self, t: gs.Tensor, perm, index: int, shape=None) -> None:
        perm = tuple(perm)
        if shape is not None:
            self._shape[t.name] = tuple(shape)
        self._forms.setdefault(t.name, {})[perm] = index
        self._home.setdefault(t.name, perm)

    def temp(self, base: str, stored, dtype=np.float32) -> int:
        return self.w.tensor(base, stored, dtype)

    def constant(self, base: str, value) -> int:
        return self.w.constant(base, np.asarray(value))

    def int32(self, base: str, values) -> int:
        return self.w.constant(base, np.asarray(values, dtype=np.int32))

    def emit(self, builtin: str, inputs, outputs, options=None, **extra):
        return self.w.op(builtin, inputs, outputs, options, **extra)

    # -- reading in a layout -------------------------------------------------------------
    def get(self, t: gs.Tensor, perm=None, dtype=None) -> int:
        """TFLite tensor holding ``t`` stored in ``perm`` (default: its home layout)."""
        value = self.const(t)
        if value is not None and t.name not in self._forms:
            value = np.asarray(value)
            if perm is None:
                perm = L.identity(value.ndim)
            if dtype is not None:
                value = value.astype(dtype)
            elif value.dtype == np.int64:
                value = value.astype(np.int32)  # TFLite kernels index with int32
            elif value.dtype == np.float64:
                value = value.astype(np.float32)
            return self.w.constant(t.name, np.transpose(value, perm))
        forms = self._forms.get(t.name)
        if forms is None:
            raise self.unsupported(f"input '{t.name}' was never produced")
        perm = self._home[t.name] if perm is None else tuple(perm)
        if perm in forms:
            return forms[perm]
        src = self._home[t.name]
        index = self.convert(forms[src], self.shape(t), src, perm, f"{t.name}/{_layout_tag(perm)}")
        forms[perm] = index
        return index

    def convert(self, index: int, shape, src, dst, name: str) -> int:
        """Write the op that re-stores tensor ``index`` (logical ``shape``) from ``src`` to ``dst``."""
        src, dst = tuple(src), tuple(dst)
        if src == dst:
            return index
        out_shape = L.stored_shape(shape, dst)
        out = self.temp(name, out_shape, self.w.tensors[index].dtype)
        if L.only_unit_axes_move(shape, src, dst):
            self.reshape_to(index, out, out_shape)
        else:
            self.emit("TRANSPOSE", [index, self.int32(f"{name}/perm", L.transpose_between(src, dst))], [out])
        return out

    def reshape_to(self, index: int, out: int, stored_out) -> None:
        opts = fb.ReshapeOptionsT()
        opts.newShape = [int(d) for d in stored_out]
        shape_const = self.int32(f"{self.w.tensors[out].name}/shape", list(stored_out))
        self.emit("RESHAPE", [index, shape_const], [out], opts)

    def broadcast_input(self, t: gs.Tensor, rank: int, perm) -> int:
        """``t`` numpy-broadcast to ``rank`` and stored in ``perm`` (for element-wise ops)."""
        value = self.const(t)
        if value is not None:
            value = np.asarray(value)
            value = value.reshape((1,) * (rank - value.ndim) + value.shape)
            if value.dtype == np.float64:
                value = value.astype(np.float32)
            return self.w.constant(t.name, np.transpose(value, perm))
        r = self.rank(t)
        if r == rank:
            return self.get(t, perm)
        src = self.home(t)
        expanded_perm = L.expand_rank(src, rank)
        shape = (1,) * (rank - r) + self.shape(t)
        base = self.get(t, src)
        expanded = self.temp(f"{t.name}/rank{rank}", L.stored_shape(shape, expanded_perm),
                             self.w.tensors[base].dtype)
        self.reshape_to(base, expanded, L.stored_shape(shape, expanded_perm))
        return self.convert(expanded, shape, expanded_perm, perm, f"{t.name}/rank{rank}/{_layout_tag(perm)}")


def _layout_tag(perm) -> str:
    return "nhwc" if tuple(perm) == L.NHWC else "p" + "".join(str(a) for a in perm)


def _np_dtype(t: gs.Tensor) -> np.dtype:
    dtype = getattr(t, "dtype", None)
    if dtype is None:
        return np.dtype(np.float32)
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(np.float32)
