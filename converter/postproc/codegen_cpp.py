"""Generate ``postprocess.hpp``: header-only C++17 post-processing for the app on the device.

API of the generated header (namespace configurable, ``edgeconv_postproc`` by default)::

    Inputs in;                       // one View<T>{pointer, shape} per cut-model output
    in.<field> = {runtime_output_ptr, {1, 4, 5, 8, 8}};
    Outputs out = postprocess(in);   // one Tensor<T>{shape, data} per original output

Field names are the tensor names made into identifiers; the manifest lists the mapping.  Only the
kernels the program uses are emitted (from ``ops_cpp``); constants are exact literals (float32 as
9 significant digits with an ``f`` suffix, which round-trips every float32).
"""

from __future__ import annotations

import math
import re

import numpy as np

from .codegen_py import POSTPROCESS, Role, wrapped_items
from .cpp_runtime import INCLUDES, RUNTIME
from .ops_cpp import kernels_for
from .program import Step

CPP_TYPES = {
    "float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t",
    "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t",
}
_KEYWORDS = set("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t
char32_t class compl const constexpr const_cast continue decltype default delete do double
dynamic_cast else enum explicit export extern false float for friend goto if inline int long mutable
namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq in out""".split())
_WIDTH = 100


def cpp_identifiers(names, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in names:
        base = prefix + (re.sub(r"\W", "_", name).strip("_") or "value")
        if base[0].isdigit():
            base = "t_" + base
        if base in _KEYWORDS:
            base += "_"
        ident, k = base, 1
        while ident in used:
            ident, k = f"{base}_{k}", k + 1
        used.add(ident)
        out[name] = ident
    return out


def scalar_literal(value, dtype: str) -> str:
    if dtype in ("float32", "float64"):
        v = float(value)
        ctype = CPP_TYPES[dtype]
        if math.isnan(v):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if math.isinf(v):
            return ("" if v > 0 else "-") + f"std::numeric_limits<{ctype}>::infinity()"
        if dtype == "float64":
            text = repr(v)
            return text if any(c in text for c in ".e") else text + ".0"
        text = f"{v:.9g}"
        return (text if any(c in text for c in ".e") else text + ".0") + "f"
    v = int(value)
    if dtype == "int64":
        return "(-9223372036854775807LL - 1)" if v == -(2**63) else f"{v}LL"
    if dtype == "int32" and v == -(2**31):
        return "(-2147483647 - 1)"
    return str(v)


def _int_list(values) -> str:
    return "std::vector<int64_t>{" + ", ".join(scalar_literal(v, "int64") for v in (values or [])) + "}"


def _constant(ident: str, value: np.ndarray) -> str:
    value = np.asarray(value)
    dtype = value.dtype.name
    ctype = CPP_TYPES[dtype]
    shape = ", ".join(scalar_literal(d, "int64") for d in value.shape)
    items = [scalar_literal(v, dtype) for v in value.reshape(-1).tolist()]
    data = "{\n" + wrapped_items(items, "    ") + "\n  }" if items else "{}"
    return f"inline const Tensor<{ctype}> {ident}{{\n  {{{shape}}},\n  {data}}};"


def _call(step: Step, args: list[str], dtypes: dict[str, str]) -> str:
    op, p = step.op, step.params
    if op in ("Max", "Min"):
        expr = args[0]
        for arg in args[1:]:
            expr = f"op_{op.lower()}({expr}, {arg})"
        return expr if len(args) > 1 else f"op_identity({expr})"
    if op == "Softmax":
        return f"op_softmax({args[0]}, {scalar_literal(p['axis'], 'int64')})"
    if op == "Clip":
        dtype = dtypes.get(step.inputs[0]) or "float32"
        low = "0" if p["min"] is None else scalar_literal(p["min"], dtype)
        high = "0" if p["max"] is None else scalar_literal(p["max"], dtype)
        return (f"op_clip({args[0]}, {str(p['min'] is not None).lower()}, {low}, "
                f"{str(p['max'] is not None).lower()}, {high})")
    if op == "Cast":
        return f"op_cast_bool({args[0]})" if p["to"] == "bool" else f"op_cast<{CPP_TYPES[p['to']]}>({args[0]})"
    if op == "Reshape":
        return f"op_reshape({args[0]}, {_int_list(p['shape'])}, {p['allowzero']})"
    if op == "Flatten":
        return f"op_flatten({args[0]}, {p['axis']})"
    if op in ("Transpose",):
        return f"op_transpose({args[0]}, {_int_list(p['perm'])})"
    if op in ("Squeeze", "Unsqueeze"):
        return f"op_{op.lower()}({args[0]}, {_int_list(p['axes'])})"
    if op == "Concat":
        return f"op_concat({p['axis']}, {', '.join(args)})"
    if op == "Split":
        return f"op_split({args[0]}, {p['axis']}, {_int_list(p['split'])}, {p['num_outputs']})"
    if op == "Slice":
        return (f"op_slice({args[0]}, {_int_list(p['starts'])}, {_int_list(p['ends'])}, "
                f"{_int_list(p['axes'])}, {_int_list(p['steps'])})")
    if op == "Gather":
        return f"op_gather({args[0]}, {args[1]}, {p['axis']})"
    if op.startswith("Reduce"):
        return f"op_{op.lower()}({args[0]}, {_int_list(p['axes'])}, {p['keepdims']})"
    if op in ("ArgMax", "ArgMin"):
        return f"op_{op.lower()}({args[0]}, {p['axis']}, {p['keepdims']}, {p['select_last_index']})"
    if op == "TopK":
        return f"op_topk({args[0]}, {p['k']}, {p['axis']}, {p['largest']})"
    return f"op_{op.lower()}({', '.join(args)})"


def generate(program: list[Step], inputs: list[dict], outputs: list[dict], constants: dict[str, np.ndarray],
             merged: dict | None, title: str, namespace: str = "edgeconv_postproc",
             dtypes: dict[str, str] | None = None, role: Role = POSTPROCESS) -> tuple[str, dict[str, str], dict[str, str]]:
    """The header text, and the ``Inputs`` and ``Outputs`` struct field name of each tensor name."""
    dtypes = dtypes or {}
    consts = cpp_identifiers(sorted(constants), "k_")
    value_names = [i["name"] for i in inputs] + [o for s in program for o in s.outputs if o]
    locals_ = cpp_identifiers(dict.fromkeys(value_names), "t_")
    ref = {**locals_, **consts}
    in_fields = cpp_identifiers([merged["name"]] if merged else [i["name"] for i in inputs])
    out_fields = cpp_identifiers([o["name"] for o in outputs])
    used = {name for s in program for name in s.inputs} | {o["name"] for o in outputs}

    lines = [
        "// " + role.heading.format(title=title),
        "// Generated by edgeconv; do not edit.  Header-only C++17, standard library only.",
        "//",
        f"//   Inputs in;  // {role.inputs_doc}: View<T>{{pointer, shape}}",
    ]
    if merged:
        lines.append(f"//   in.{in_fields[merged['name']]} = {{data, {{{', '.join(map(str, merged['shape']))}}}}};"
                     f"  // {merged['dtype']}, packs:")
        lines += [f"//     [{p['offset']}, {p['offset'] + p['numel']}) {p['name']}: {p['dtype']}{p['shape']}"
                  for p in merged["pieces"]]
    else:
        lines += [f"//   in.{in_fields[i['name']]} = {{data, shape}};  // '{i['name']}' {i['dtype']}{i['shape']}"
                  for i in inputs]
    lines.append(f"//   Outputs out = {role.function}(in);  // {role.outputs_doc}: Tensor<T>{{shape, data}}")
    lines += [f"//   out.{out_fields[o['name']]}  // '{o['name']}' {o['dtype']}{o['shape']}" for o in outputs]
    lines += ["#pragma once", ""] + [f"#include <{h}>" for h in INCLUDES] + ["", f"namespace {namespace} {{"]
    lines.append(RUNTIME.rstrip())
    for text in kernels_for({s.op for s in program}):
        lines += ["", text]
    lines.append("")
    for name in sorted(constants):
        lines += [f"// {name}", _constant(consts[name], constants[name])]
    lines.append("")

    lines.append("struct Inputs {")
    if merged:
        lines.append(f"  View<{CPP_TYPES[merged['dtype']]}> {in_fields[merged['name']]};  // '{merged['name']}'")
    else:
        lines += [f"  View<{CPP_TYPES[i['dtype']]}> {in_fields[i['name']]};  // '{i['name']}'" for i in inputs]
    lines += ["};", "", "struct Outputs {"]
    lines += [f"  Tensor<{CPP_TYPES[o['dtype']]}> {out_fields[o['name']]};  // '{o['name']}'" for o in outputs]
    lines += ["};", "", f"inline Outputs {role.function}(const Inputs& in) {{"]
    for i in inputs:
        ctype = CPP_TYPES[i["dtype"]]
        if merged:
            piece = next(p for p in merged["pieces"] if p["name"] == i["name"])
            shape = ", ".join(scalar_literal(d, "int64") for d in piece["shape"])
            lines.append(f"  const Tensor<{ctype}> {locals_[i['name']]} = detail::unpack<{ctype}>("
                         f"in.{in_fields[merged['name']]}, {piece['offset']}, {{{shape}}});")
        else:
            lines.append(f"  const Tensor<{ctype}> {locals_[i['name']]} = detail::from_view(in.{in_fields[i['name']]});")
    for k, step in enumerate(program):
        call = _call(step, [ref[n] for n in step.inputs], dtypes)
        comment = f"  // {step.node} ({step.op})"
        if step.op in ("Split", "TopK"):
            result = f"r{k}_{locals_[next(o for o in step.outputs if o)]}"
            lines.append(f"  const auto {result} = {call};{comment}")
            for j, name in enumerate(step.outputs):
                if name and name in used:
                    part = (f"{result}[{j}]" if step.op == "Split" else f"{result}.{'first' if j == 0 else 'second'}")
                    lines.append(f"  const auto& {locals_[name]} = {part};")
        else:
            lines.append(f"  const auto {locals_[step.outputs[0]]} = {call};{comment}")
    lines.append("  Outputs out;")
    lines += [f"  out.{out_fields[o['name']]} = {ref[o['name']]};" for o in outputs]
    lines += ["  return out;", "}", "", f"}}  // namespace {namespace}", ""]
    return "\n".join(lines), in_fields, out_fields
