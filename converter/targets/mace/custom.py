"""A custom-layer node (remedy 4) as a MACE ``OperatorDef`` of its own type.

The op's type is the layer name the generated ``MACE_REGISTER_OP`` registers (``templates/mace_op.cc.j2``), and each ONNX attribute becomes an ``Argument`` of the same name: ints in ``i``,
floats in ``f``, strings in ``s``, lists in ``ints``/``floats`` (``mace/proto/mace.proto``), which
the op reads back with ``GetOptionalArg``/``GetRepeatedArgs``.  ``data_format`` is NCHW (never
AUTO), so MACE's runtime hands the op its tensors in the ONNX layout.
"""

from __future__ import annotations

from typing import Any

_ARG_KIND = {int: "i", float: "f", str: "s"}


def _arg(name: str, value: Any) -> tuple[str, str, Any]:
    if isinstance(value, list):
        return name, "ints" if all(isinstance(v, int) for v in value) else "floats", value
    return name, _ARG_KIND[type(value)], value


def convert_custom(em, node, layer: str, attrs: dict[str, Any]) -> None:
    """Emit ``node`` through the MACE ``Emitter`` as one op of type ``layer``."""
    em.op(layer, node.name, [em.name_of(t) for t in node.inputs if t.name],
          [em.name_of(t) for t in node.outputs], args=[_arg(k, v) for k, v in sorted(attrs.items())])


REGISTRATION = ("Add `mace/{op}_op.cc` to mace/ops and register it in mace/ops/registry/ops_registry.cc "
                "(`extern void Register{name}(OpRegistry*)`; call it in the constructor).")


def scaffold_files(ops, name: str) -> dict[str, bytes]:
    """The MACE op (``MACE_REGISTER_OP``) of one custom op type."""
    from pathlib import Path

    from ...custom.scaffold import number, render

    op = ops[0]
    return {f"mace/{op.slug}_op.cc": render("mace_op.cc.j2", Path(__file__).with_name("templates"), op=op, name=name,
                                            number=number).encode()}
