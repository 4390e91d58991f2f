"""Files every custom layer gets, whatever the framework: the reference kernel, the harness and
the saved node data.  Each target adds its own wrapper files around these
(``Target.custom_layer_files``, in ``converter/targets/<name>/custom.py`` with its templates).
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from .capture import NodeData
from .spec import CustomOp

KERNELS_DIR = Path(__file__).with_name("kernels")
TEMPLATES_DIR = Path(__file__).with_name("templates")
#: Harness tolerance: max abs error <= ATOL + RTOL * max |reference|.
ATOL, RTOL = 1e-5, 1e-5
_SAFE = set(string.ascii_letters + string.digits + "_.-")


def render(template: str, directory: Path = TEMPLATES_DIR, **context) -> str:
    """Render ``template`` from ``directory`` (the shared templates here, or a target's own
    ``templates/``)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(directory)), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    return env.get_template(template).render(**context)


def token(value: str) -> str:
    """A string as one whitespace/comma-free token: percent-encoded; '' is a lone '%'."""
    if value == "":
        return "%"
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in value)


def number(value: float) -> str:
    return f"{np.float32(value).item():.9g}"


def attrs_text(op: CustomOp) -> str:
    lines = []
    for name, kind in op.kinds.items():
        value = op.attrs[name]
        if kind == "int":
            lines.append(f"int {name} {value}")
        elif kind == "float":
            lines.append(f"float {name} {number(value)}")
        elif kind == "string":
            lines.append(f"string {name} {token(value)}")
        elif kind == "ints":
            lines.append(f"ints {name} {len(value)} " + " ".join(str(v) for v in value))
        else:
            lines.append(f"floats {name} {len(value)} " + " ".join(number(v) for v in value))
    return "".join(line.rstrip() + "\n" for line in lines)


def node_dir(node: str) -> str:
    return token(node).replace("%", "_") or "_"


def data_files(op: CustomOp, data: NodeData) -> dict[str, bytes]:
    """``data/<node>/``: io.txt, attrs.txt and one little-endian .bin per tensor."""
    base = f"data/{node_dir(op.node)}"
    files: dict[str, bytes] = {f"{base}/attrs.txt": attrs_text(op).encode()}
    lines = [f"# {op.qualified} node '{op.node}': role index dtype rank dims... file ('-' = not saved)"]
    for role, specs, values in (("input", op.inputs, data.inputs), ("output", op.outputs, data.outputs)):
        for i, spec in enumerate(specs):
            name = f"{role}_{i}.bin"
            value = None if values is None else np.ascontiguousarray(values[i], dtype=np.dtype(spec.dtype).newbyteorder("<"))
            if value is not None:
                files[f"{base}/{name}"] = value.tobytes()
            dims = " ".join(str(d) for d in spec.shape)
            lines.append(f"{role} {i} {spec.dtype} {len(spec.shape)} {dims} {name if value is not None else '-'}".replace("  ", " "))
    if data.note:
        lines.append(f"# {data.note}")
    files[f"{base}/io.txt"] = ("\n".join(lines) + "\n").encode()
    return files


def kernel_files(ops: list[CustomOp]) -> dict[str, bytes]:
    """The framework-neutral kernel for one op type (shared by all its nodes) and the harness."""
    op = ops[0]
    files = {"edgeconv_custom.hpp": (KERNELS_DIR / "edgeconv_custom.hpp").read_bytes()}
    if op.kernel:
        files[op.kernel] = (KERNELS_DIR / op.kernel).read_bytes()
        kernel = render("kernel_known.hpp.j2", op=op)
    else:
        recorded = [([list(t.shape) for t in o.inputs], [list(t.shape) for t in o.outputs]) for o in ops]
        kernel = render("kernel_fill_in.hpp.j2", op=op, nodes=[o.node for o in ops], recorded=recorded)
    files[f"{op.slug}_kernel.hpp"] = kernel.encode()
    files["harness.cpp"] = render("harness.cpp.j2", op=op, atol=ATOL, rtol=RTOL).encode()
    return files
