"""Einsum as Transpose / Reshape / MatMul (/ ReduceSum): exact, for every target that has MatMul.

Attention and MaxViT write their products as Einsum (``bhqd,bhkd->bhqk``, ``bhqk,bhkd->bhqd``,
``bij,bjk->bik``, ``...ij,...jk->...ik``, ``bchw,bkc->bkhw``); only TNN's CUDA/naive devices and
CoreML have an Einsum.  Two operands contract as one batched matrix product: each index is a
*batch* index (in both operands and the output), a *contracted* one (both operands, not the
output), or a *free* one (one operand and the output); an index in one operand only and not in the
output is summed first.  So

    A ─► Transpose[batch, free_A, contracted] ─► Reshape[Bt, M, K] ─┐
    B ─► Transpose[batch, contracted, free_B] ─► Reshape[Bt, K, N] ─► MatMul ─► Reshape ─► Transpose ─► y

with the operands swapped when the output lists B's free indices first, index orders taken from
the output so that the trailing Transpose is usually the identity (then omitted), and constant
operands rearranged at export time.  Three or more operands contract left to right, keeping the
indices still needed.  Declined, with the reason: a repeated index within one operand (a diagonal),
operands whose ``...`` or index sizes differ (broadcasting), unknown shapes.
"""

from __future__ import annotations

import math
import string

import numpy as np
import onnx_graphsurgeon as gs

from ...ir.graph import attr, constant_value, static_shape
from .base import float_input, rule


class _Refuse(Exception):
    pass


def _decode(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def parse(equation: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """(one index string per operand, the output's), ``...`` spelled out as spare letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise _Refuse(f"equation has {len(terms)} operands, the node {len(shapes)}")
    used = set(eq) & set(string.ascii_letters)
    spare = [c for c in string.ascii_uppercase + string.ascii_lowercase if c not in used]
    ell_rank = None
    out_terms = []
    for term, shape in zip(terms, shapes):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            raise _Refuse(f"malformed term {term!r}")
        if "..." in term:
            k = len(shape) - (len(term) - 3)
            if ell_rank is not None and k != ell_rank:
                raise _Refuse("operands' '...' cover different ranks (broadcasting)")
            ell_rank = k
            term = term.replace("...", "".join(spare[:k]))
        if len(term) != len(shape):
            raise _Refuse(f"term {term!r} does not match a rank-{len(shape)} operand")
        if len(set(term)) != len(term):
            raise _Refuse(f"repeated index in {term!r} (a diagonal) has no MatMul form")
        out_terms.append(term)
    ell = "".join(spare[:ell_rank or 0])
    if arrow:
        if rhs.count("...") > 1 or "." in rhs.replace("...", ""):
            raise _Refuse(f"malformed output {rhs!r}")
        out = rhs.replace("...", ell)
    else:  # implicit output: '...' then the indices used once, alphabetically
        counts = {c: sum(t.count(c) for t in terms) for c in used}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(out)) != len(out) or not set(out) <= set("".join(out_terms)):
        raise _Refuse(f"output {out!r} repeats an index or names one no operand has")
    sizes: dict[str, int] = {}
    for term, shape in zip(out_terms, shapes):
        for c, n in zip(term, shape):
            if sizes.setdefault(c, n) != n:
                raise _Refuse(f"index {c!r} has sizes {sizes[c]} and {n} (broadcasting)")
    return out_terms, out


def _operand_shapes(node):
    shapes = []
    for t in node.inputs:
        c = constant_value(t)
        shape = tuple(c.shape) if c is not None else static_shape(t)
        if shape is None:
            raise _Refuse(f"operand {t.name} has no static shape")
        shapes.append(shape)
    return shapes


def _einsum_ok(node, graph):
    try:
        parse(_decode(attr(node, "equation", "")), _operand_shapes(node))
    except _Refuse as why:
        return str(why)
    return float_input(node, graph)


class _Builder:
    """Operands as (tensor or constant array, index string, shape)."""

    def __init__(self, rw, sizes):
        self.rw, self.sizes = rw, sizes

    def arrange(self, value, have: str, want: str):
        """``value`` (indices ``have``) transposed to ``want`` (a permutation of ``have``)."""
        if have == want:
            return value
        perm = [have.index(c) for c in want]
        if isinstance(value, np.ndarray):
            return value.transpose(perm)
        return self.rw.emit("Transpose", [value], {"perm": perm})

    def reshape(self, value, shape):
        shape = [int(s) for s in shape]
        if isinstance(value, np.ndarray):
            return value.reshape(shape)
        return self.rw.reshape(value, shape)

    def tensor(self, value):
        return self.rw.const("operand", value) if isinstance(value, np.ndarray) else value

    def size(self, letters: str) -> int:
        return int(math.prod(self.sizes[c] for c in letters))

    def sum_out(self, value, have: str, drop: str):
        if not drop:
            return value, have
        axes = [have.index(c) for c in drop]
        if isinstance(value, np.ndarray):
            return value.sum(axis=tuple(axes)), "".join(c for c in have if c not in drop)
        return (self.rw.reduce("ReduceSum", value, axes, keepdims=0),
                "".join(c for c in have if c not in drop))

    def contract(self, a, la: str, b, lb: str, keep: str, order: str):
        """A·B over the shared indices not in ``keep``; returns (value, its index string), the
        kept indices in ``order``'s order where it lists them."""
        a, la = self.sum_out(a, la, "".join(c for c in la if c not in lb and c not in keep))
        b, lb = self.sum_out(b, lb, "".join(c for c in lb if c not in la and c not in keep))
        rank_of = {c: i for i, c in enumerate(order)}
        by_order = lambda s: "".join(sorted(s, key=lambda c: (rank_of.get(c, len(order)), s.index(c))))  # noqa: E731
        batch = by_order([c for c in la if c in lb and c in keep])
        summed = "".join(c for c in la if c in lb and c not in keep)
        free_a = by_order([c for c in la if c not in lb])
        free_b = by_order([c for c in lb if c not in la])
        rest = [c for c in order if c in free_a + free_b]
        if rest and rest[0] in free_b:  # the output lists B's free indices first: compute Bᵀ·Aᵀ order
            a, la, b, lb, free_a, free_b = b, lb, a, la, free_b, free_a
        left = self.arrange(a, la, batch + free_a + summed)
        right = self.arrange(b, lb, batch + summed + free_b)
        # Up to two batch dims stay as they are (a rank-4 MatMul), more are merged into one.
        lead = [self.sizes[c] for c in batch] if len(batch) <= 2 else [self.size(batch)]
        shape_l = lead + [self.size(free_a), self.size(summed)]
        shape_r = lead + [self.size(summed), self.size(free_b)]
        if [self.sizes[c] for c in batch + free_a + summed] != shape_l:
            left = self.reshape(left, shape_l)
        if [self.sizes[c] for c in batch + summed + free_b] != shape_r:
            right = self.reshape(right, shape_r)
        if isinstance(left, np.ndarray) and isinstance(right, np.ndarray):
            product = np.matmul(left, right)
        else:
            product = self.rw.emit("MatMul", [self.tensor(left), self.tensor(right)])
        letters = batch + free_a + free_b
        full = [self.sizes[c] for c in letters]
        if lead + [self.size(free_a), self.size(free_b)] != full:
            product = self.reshape(product, full)
        return product, letters


@rule("Einsum", emits=["Transpose", "Reshape", "MatMul", "ReduceSum"], when=_einsum_ok)
def einsum_to_matmul(rw, node):
    """before: A[b,h,q,d], B[b,h,k,d] ─► Einsum("bhqd,bhkd->bhqk") ─► y
    after:  B ─► Transpose(0,1,3,2) ─► Bᵀ;  A, Bᵀ ─► MatMul ─► y      (batched matrix product)
    In general: Transpose + Reshape each operand to [batch, rows, k] / [batch, k, cols], one MatMul,
    Reshape + Transpose to the output's indices (each step omitted when it is the identity).
    """
    shapes = _operand_shapes(node)
    terms, out = parse(_decode(attr(node, "equation", "")), shapes)
    sizes = {c: n for term, shape in zip(terms, shapes) for c, n in zip(term, shape)}
    b = _Builder(rw, sizes)
    values = [constant_value(t) if constant_value(t) is not None else t for t in node.inputs]
    acc, la = values[0], terms[0]
    if len(values) == 1:
        acc, la = b.sum_out(acc, la, "".join(c for c in la if c not in out))
    for i in range(1, len(values)):
        needed = out + "".join(terms[i + 1:])
        acc, la = b.contract(acc, la, values[i], terms[i], "".join(c for c in la + terms[i] if c in needed), out)
    acc = b.arrange(acc, la, out)
    if isinstance(acc, np.ndarray):
        acc = rw.const("result", acc)
    producer = acc.inputs[0] if isinstance(acc, gs.Variable) and acc.inputs else None
    if producer is not None and producer in rw.new_nodes:
        producer.outputs[producer.outputs.index(acc)] = rw.outputs[0]
    else:  # the result is an operand itself (a plain copy): an explicit Reshape keeps the output
        rw.reshape(acc, [sizes[c] for c in out], outputs=rw.outputs[:1])
