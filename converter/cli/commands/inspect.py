"""``edgeconv inspect MODEL``: inputs/outputs, op histogram, parameter count, opset."""

from __future__ import annotations

import typer

from .options import Json, ModelSource, model_options, stdout_console


def describe(model) -> dict:
    """A JSON-ready description of an ONNX model."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from ...ir.graph import model_opset, op_histogram

    def value_info(v):
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
        return {"name": v.name, "shape": dims, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
                if t.elem_type else None}

    inits = {i.name for i in model.graph.initializer}
    params = int(sum(np.prod(i.dims, dtype=np.int64) for i in model.graph.initializer))
    del numpy_helper
    return {
        "inputs": [value_info(v) for v in model.graph.input if v.name not in inits],
        "outputs": [value_info(v) for v in model.graph.output],
        "opset": model_opset(model),
        "nodes": len(model.graph.node),
        "parameters": params,
        "op_histogram": op_histogram(model),
    }


def register(app: typer.Typer) -> None:
    @app.command("inspect", short_help="Inputs, outputs, op histogram, parameters, opset.")
    @model_options()
    def inspect_cmd(
        source: ModelSource = None,  # MODEL, -s, --trust-pickle (see options.model_options)
        normalized: bool = typer.Option(False, "--normalized", help="Describe the model after normalization."),
        json_out: bool = Json,
    ) -> None:
        """Show a model's inputs, outputs, op histogram, parameter count and opset."""
        onnx_model = source.normalized(require_static=False) if normalized else source.load()
        info = describe(onnx_model)
        if json_out:
            import json

            print(json.dumps(info, indent=2))
            return
        from rich.markup import escape  #  (names and paths are user text, not markup)
        from rich.table import Table

        console = stdout_console()
        console.print(f"{escape(str(source.path))}: opset {info['opset']}, {info['nodes']} nodes, {info['parameters']:,} parameters",
                      highlight=False)
        io = Table()
        for col in ("", "name", "shape", "dtype"):
            io.add_column(col)
        for kind in ("inputs", "outputs"):
            for v in info[kind]:
                io.add_row(kind[:-1], escape(v["name"]), escape("x".join(str(d) for d in v["shape"])),
                           escape(str(v["dtype"])))
        console.print(io)
        ops = Table()
        ops.add_column("op")
        ops.add_column("count", justify="right")
        for op, n in sorted(info["op_histogram"].items(), key=lambda kv: (-kv[1], kv[0])):
            ops.add_row(escape(op), str(n))
        console.print(ops)
