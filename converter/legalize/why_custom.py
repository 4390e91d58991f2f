"""Why a node got remedy (4): what the matrix says, why no rewrite chain fits, why it cannot
move into post-processing.  Used when the caller has no planner reason at hand."""

from __future__ import annotations

import onnx_graphsurgeon as gs


def why_custom(graph: gs.Graph, node: gs.Node, framework: str) -> str:
    from ..matrix import load_matrix
    from .plan import ChainSearch

    matrix = load_matrix()
    parts = []
    try:
        hardware = matrix.hardware(framework)
    except Exception:  # noqa: BLE001 - an unknown framework has no matrix column
        hardware = []
    rejected = [hw for hw in hardware if not matrix.check_node(node, framework, hw).supported]
    if rejected:
        verdict = matrix.check_node(node, framework, rejected[0])
        parts.append(f"{framework} has no {node.op} on {', '.join(rejected)} ({verdict.reason})")
    else:
        parts.append(f"forced with --custom-op {node.op} ({framework} supports it)")
    if hardware:
        parts.append(ChainSearch(matrix, framework, rejected[0] if rejected else hardware[0]).why_no_rule(node, graph))
    try:
        from ..postproc.cut import find_cut

        cut = find_cut(graph, {node.name})
        parts.append("could move to post-processing, but was forced" if cut.ok
                     else f"not trailing, so no post-processing split ({cut.reason})")
    except ImportError:
        pass
    return "; ".join(parts)
