"""``edgeconv inspect MODEL``: inputs/outputs, op histogram, parameter count, opset."""

from __future__ import annotations

import typer

from .options import InputShape, Json, ShapeList, TrustPickle


def describe(model) -> dict:
    """A JSON-ready description of an ONNX model."""
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from onnx import numpy_helper  # noqa: PLC0415

    from ..graph import model_opset, op_histogram  # noqa: PLC0415

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
    @app.command("inspect")
    def inspect_cmd(
        model: str = typer.Argument(..., help="Model file (.onnx, .pt, .pt2, .pb, .tflite, ...)."),
        input_shape: ShapeList = InputShape,
        trust_pickle: bool = TrustPickle,
        normalized: bool = typer.Option(False, "--normalized", help="Describe the model after normalization."),
        json_out: bool = Json,
    ) -> None:
        """Show a model's inputs, outputs, op histogram, parameter count and opset."""
        from ..load import load_model, parse_shape_flags  # noqa: PLC0415
        from .options import load_normalized  # noqa: PLC0415

        if normalized:
            onnx_model = load_normalized(model, input_shape, trust_pickle, require_static=False)
        else:
            onnx_model = load_model(model, parse_shape_flags(input_shape), trust_pickle)
        info = describe(onnx_model)
        if json_out:
            import json  # noqa: PLC0415

            print(json.dumps(info, indent=2))
            return
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415

        console = Console()
        io = Table(title=f"{model}  (opset {info['opset']}, {info['nodes']} nodes, {info['parameters']:,} parameters)")
        for col in ("", "name", "shape", "dtype"):
            io.add_column(col)
        for kind in ("inputs", "outputs"):
            for v in info[kind]:
                io.add_row(kind[:-1], v["name"], "x".join(str(d) for d in v["shape"]), str(v["dtype"]))
        console.print(io)
        ops = Table(title="ops")
        ops.add_column("op")
        ops.add_column("count", justify="right")
        for op, n in sorted(info["op_histogram"].items(), key=lambda kv: (-kv[1], kv[0])):
            ops.add_row(op, str(n))
        console.print(ops)
