"""Options shared by several commands (typer declarations only: no heavy imports)."""

from __future__ import annotations

from typing import List, Optional

import typer

InputShape = typer.Option(
    None, "--input-shape", "-s",
    help="Fix an input shape, e.g. input=1x3x224x224 (repeatable; a bare 1x3x8x8 means the first input).",
)
TrustPickle = typer.Option(
    False, "--trust-pickle", help="Allow loading a pickled torch.nn.Module (runs code from the file).",
)
Json = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")
MatrixPath = typer.Option(None, "--matrix", help="Use this op support matrix instead of the bundled one.")
MatrixOverlay = typer.Option(None, "--matrix-overlay", help="YAML that adds or overrides matrix entries (repeatable).")

ShapeList = Optional[List[str]]


def load_normalized(path: str, input_shape: ShapeList, trust_pickle: bool, require_static: bool = True):
    """Load any supported model and normalize it: the first two stages of every command."""
    from ..load import load_model, parse_shape_flags  # noqa: PLC0415
    from ..normalize import normalize, dynamic_inputs  # noqa: PLC0415

    shapes = parse_shape_flags(input_shape)
    model = load_model(path, shapes, trust_pickle)
    if "" in shapes:  # a bare shape names the first graph input
        shapes[model.graph.input[0].name] = shapes.pop("")
    normalized = normalize(model, shapes or None)
    if require_static:
        from ..errors import BadInput  # noqa: PLC0415

        problems = dynamic_inputs(normalized)
        if problems:
            raise BadInput(problems[0])
    return normalized
