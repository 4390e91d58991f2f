"""Find the first layer where an exported file departs from the legalized ONNX it was made from.

The ``target:<fw>`` stage runs the written file on the target's runtime.  When it fails, the
target's optional ``intermediates(artifact, inputs)`` (``converter/targets/base.py``) returns the
value of every tensor the file materializes, keyed by the legalized ONNX tensor it computes and
already back in ONNX layout and dtype.  The reference is the legalized model itself (what was
exported) run in onnxruntime with every intermediate tensor exposed, so a failure here isolates
the export: a rewrite that changed the numbers fails the ``legalized`` stage instead.

Tensors are compared in the legalized model's topological order by normalized rMSE, as
:func:`converter.verify.localize.localize` does, and the first one above the tolerance is the
guilty layer.  It is reported with its ONNX op, the target layer (type and name in the file)
that computed it, and the *target mapping*: ``"tflite Conv+Relu -> CONV_2D"`` says the file's
CONV_2D computes the legalized Conv and the Relu after it (the Conv's own output is not in the
file: the activation was fused).  When a rewrite rule produced the legalized node, the rule is
named first (``"rule X; tnn Conv -> Convolution"``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from ..ir.graph import provenance_of
from . import metrics
from .localize import DEFAULT_LAYER_TOL, LayerReport, LayerResult, _comparable, _topological_nodes, intermediate_values
from ..errors import TimedOut
from ..runtimes.onnxruntime import one_line

#: Why a legalized tensor has no counterpart in the file.
NOT_MATERIALIZED = "not materialized by the target (fused into a later layer, or computed inside one)"


@dataclass
class TargetLocalizer:
    """What a target stage needs to localize itself: ``localizer(sample, tolerance)``."""

    target: Any
    artifact: Any
    #: The legalized (possibly cut) ONNX model the artifact was exported from.
    reference: onnx.ModelProto

    def __call__(self, sample: dict[str, np.ndarray], tolerance: float = DEFAULT_LAYER_TOL) -> LayerReport:
        return localize_target(self.reference, self.target, self.artifact, sample, tolerance)


def _fused_nodes(tensor: str, producer: dict[str, tuple[str, str, list[str]]], exposed: set[str]) -> list[tuple[str, str]]:
    """Reference nodes before ``tensor``'s producer whose outputs the target does not expose
    and that are reached without crossing an exposed tensor: the target layer computing
    ``tensor`` computes them too.  ``producer``: tensor -> (node, op, input tensors)."""
    found: dict[str, str] = {}
    stack = list(producer[tensor][2]) if tensor in producer else []
    while stack:
        name = stack.pop()
        if name in exposed or name not in producer:
            continue  # a tensor the target has, a graph input or a constant: stop here
        node, op, inputs = producer[name]
        if node in found or op == "Constant":
            continue
        found[node] = op
        stack.extend(inputs)
    return list(found.items())


def _mapping(target: str, ops: list[str], layer_type: str, rules: list[str]) -> str:
    text = f"{target} {'+'.join(ops)} -> {layer_type}"
    return f"rule {', '.join(rules)}; {text}" if rules else text


def localize_target(
    reference: onnx.ModelProto,
    target,
    artifact,
    inputs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
    tolerance: float = DEFAULT_LAYER_TOL,
) -> LayerReport:
    """Per-layer normalized rMSE of ``target``'s file (``artifact``) against ``reference``."""
    start = time.perf_counter()
    sample = inputs[0] if isinstance(inputs, list) else inputs
    report = LayerReport(tolerance=tolerance, reference_nodes=len(reference.graph.node), target=target.name)
    try:
        ref_values = intermediate_values(reference, sample)
        got = target.intermediates(artifact, sample)
    except TimedOut:
        raise  # past --timeout: no second wait for a localization
    except Exception as err:  # noqa: BLE001 - a localization that cannot run says why, once
        report.error = one_line(err)
        report.seconds = time.perf_counter() - start
        return report
    report.candidate_nodes = got.layer_count

    nodes = _topological_nodes(reference)
    inputs_of = {n.name: [i for i in n.input if i] for n in reference.graph.node}
    producer = {out: (name, op, inputs_of.get(name, [])) for name, op, outs in nodes for out in outs}
    prov = provenance_of(reference)
    exposed = set(got)
    graph_inputs = {i.name for i in reference.graph.input}
    report.unmapped_candidate = sorted(set(got) - set(ref_values))
    for node_name, op, outputs in nodes:
        for tensor in outputs:
            if tensor not in ref_values or tensor in graph_inputs:
                continue
            if tensor not in got:
                report.skipped[tensor] = NOT_MATERIALIZED
                continue
            ref = ref_values[tensor]
            value, reason = _comparable(ref, np.asarray(got[tensor]))
            if value is None:
                report.skipped[tensor] = reason
                continue
            fused = _fused_nodes(tensor, producer, exposed)
            fused_names = {name for name, _ in fused}
            covered = [(n, o) for n, o, _ in nodes if n in fused_names] + [(node_name, op)]
            rules = sorted({origin["by"] for n, _ in covered if (origin := prov.node_origin.get(n))})
            rmse = metrics.normalized_rmse(ref, value)
            report.layers.append(LayerResult(
                index=len(report.layers), node=node_name, op=op, tensor=tensor,
                candidate_tensor=got.target_tensors[tensor], candidate_node=got.layer_names[tensor],
                candidate_op=got.layer_types[tensor],
                by=_mapping(target.name, [o for _, o in covered], got.layer_types[tensor], rules),
                rmse=rmse, max_abs=metrics.max_abs(ref, value), shape=[int(d) for d in ref.shape],
                above=math.isnan(rmse) or rmse > tolerance, also_computes=[n for n, _ in covered[:-1]],
            ))
    report.seconds = time.perf_counter() - start
    return report
