"""Find the first layer where a converted graph departs from its reference.

Both graphs are copied with *every* intermediate tensor made a graph output (one onnxruntime
run each, instead of one run per tensor), candidate tensors are mapped to reference tensors with
the provenance the rewrites recorded (``Provenance.tensor_origin``; a tensor nobody renamed maps
to the reference tensor of the same name), and the normalized rMSE of each mapped tensor is
computed in the reference's topological order.  The first layer whose rMSE exceeds the tolerance
is the guilty one: once a layer is wrong, everything after it is wrong too, so only the first
one says where the conversion broke.  Its op type and the rule or target mapping that produced
the candidate node (``Provenance.node_origin[...]["by"]``) are reported with it.

Candidate tensors without a counterpart in the reference (intermediates a rewrite introduced and
did not map) are skipped: there is nothing to compare them with.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..ir.graph import Provenance, provenance_of, to_graph
from . import metrics
from ..errors import TimedOut
from ..runtimes.onnxruntime import expose_intermediates, intermediate_values, one_line, run_session, session  # noqa: F401

#: Default per-layer normalized rMSE above which a layer counts as diverging.  float32
#: re-association (BN folding, fused bias, reordered sums) stays below ~1e-6; quantization-free
#: conversions that are really wrong land far above 1e-2.
DEFAULT_LAYER_TOL = 1e-3

#: ``by`` of a candidate node that no rewrite or mapping touched.
UNCHANGED = "unchanged"


@dataclass
class LayerResult:
    #: Position among the compared layers (reference topological order).
    index: int
    node: str
    op: str
    tensor: str
    candidate_tensor: str
    candidate_node: str | None
    candidate_op: str | None
    #: The rule or target mapping that produced the candidate node (from provenance).
    by: str
    rmse: float
    max_abs: float
    shape: list[int]
    above: bool
    #: Target stages: other reference nodes the candidate layer computes too (their outputs are
    #: not in the file, e.g. a Conv whose ReLU the target fused), in topological order.
    also_computes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class LayerReport:
    tolerance: float
    layers: list[LayerResult] = field(default_factory=list)
    #: Reference tensors not compared, with the reason (no counterpart, shape differs, ...).
    skipped: dict[str, str] = field(default_factory=dict)
    #: Candidate tensors that map to no reference tensor.
    unmapped_candidate: list[str] = field(default_factory=list)
    reference_nodes: int = 0
    candidate_nodes: int = 0
    seconds: float = 0.0
    #: Set when localization itself could not run (e.g. onnxruntime cannot load a graph).
    error: str | None = None
    #: The framework whose exported file was compared (``target_layers.py``); None when the
    #: candidate is an ONNX graph.
    target: str | None = None

    @property
    def first(self) -> LayerResult | None:
        return next((layer for layer in self.layers if layer.above), None)

    @property
    def ok(self) -> bool:
        return self.error is None and self.first is None

    def retolerance(self, tolerance: float) -> None:
        """Judge the same per-layer values against another tolerance."""
        self.tolerance = tolerance
        for layer in self.layers:
            layer.above = math.isnan(layer.rmse) or layer.rmse > tolerance

    def summary(self) -> str:
        if self.error:
            return f"per-layer comparison failed: {self.error}"
        first = self.first
        if first is None:
            return (f"no layer above normalized rMSE {self.tolerance:g} "
                    f"({len(self.layers)} layers compared)")
        where = f" in the {self.target} file" if self.target else ""
        return (f"first diverging layer{where}: {first.node} ({first.op}) -> tensor {first.tensor}, "
                f"normalized rMSE {first.rmse:.3g} > {self.tolerance:g}, produced by {first.by}"
                + (f" as {first.candidate_node} ({first.candidate_op})"
                   if first.candidate_node and first.candidate_node != first.node else "")
                + (f", which also computes {', '.join(first.also_computes)}" if first.also_computes else ""))

    def to_dict(self) -> dict:
        first = self.first
        return {
            "tolerance": self.tolerance,
            "first_diverging": first.to_dict() if first else None,
            "layers": [layer.to_dict() for layer in self.layers],
            "skipped": dict(self.skipped),
            "unmapped_candidate_tensors": len(self.unmapped_candidate),
            "reference_nodes": self.reference_nodes,
            "candidate_nodes": self.candidate_nodes,
            # ``seconds`` stays out: the JSON report must be byte-identical on a rerun.
            "error": self.error,
            "target": self.target,
            "summary": self.summary(),
        }


def _producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in model.graph.node for out in node.output if out}


def _topological_nodes(model: onnx.ModelProto) -> list[tuple[str, str, list[str]]]:
    graph = to_graph(model)
    graph.toposort()
    return [(n.name, n.op, [o.name for o in n.outputs]) for n in graph.nodes]


def map_tensors(reference_names: set[str], candidate_names: list[str], prov: Provenance) -> tuple[dict[str, str], list[str]]:
    """``{reference tensor: candidate tensor}`` and the candidate tensors left unmapped.

    A candidate tensor stands for ``prov.original_tensor(name)``; when several candidates stand
    for the same reference tensor the one with the same name wins, else the first in topological
    order (a rewrite that decomposes an op records its final output, not the pieces).
    """
    mapping: dict[str, str] = {}
    unmapped: list[str] = []
    for name in candidate_names:
        original = prov.original_tensor(name)
        if original not in reference_names:
            unmapped.append(name)
            continue
        if original not in mapping or name == original:
            mapping[original] = name
    return mapping, unmapped


def _comparable(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray | None, str | None]:
    """``got`` in ``ref``'s shape, or a reason why it cannot be compared element by element."""
    if ref.shape == got.shape:
        return got, None
    squeeze = lambda s: tuple(d for d in s if d != 1)  # noqa: E731
    if ref.size == got.size and squeeze(ref.shape) == squeeze(got.shape):
        return got.reshape(ref.shape), None  # only size-1 axes differ: same element order
    return None, f"shape differs: reference {list(ref.shape)}, candidate {list(got.shape)}"


def localize(
    reference_model: onnx.ModelProto,
    candidate_model: onnx.ModelProto,
    inputs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
    provenance: Provenance | None = None,
    tolerance: float = DEFAULT_LAYER_TOL,
) -> LayerReport:
    """Per-layer normalized rMSE of ``candidate_model`` against ``reference_model`` on one sample.

    ``provenance`` defaults to the one stored in the candidate model's metadata.
    """
    start = time.perf_counter()
    sample = inputs[0] if isinstance(inputs, list) else inputs
    prov = provenance if provenance is not None else provenance_of(candidate_model)
    report = LayerReport(tolerance=tolerance, reference_nodes=len(reference_model.graph.node),
                         candidate_nodes=len(candidate_model.graph.node))
    try:
        ref_exposed, _ = expose_intermediates(reference_model)
        cand_exposed, cand_order = expose_intermediates(candidate_model)
        ref_values = run_session(session(ref_exposed), sample)
        cand_values = run_session(session(cand_exposed), sample)
    except TimedOut:
        raise  # past --timeout: no second wait for a localization
    except Exception as err:  # BadInput from onnxruntime, or an unloadable exposed copy
        report.error = one_line(err)
        report.seconds = time.perf_counter() - start
        return report

    mapping, report.unmapped_candidate = map_tensors(set(ref_values), [n for n in cand_order if n in cand_values], prov)
    cand_producer = _producers(candidate_model)
    graph_inputs = {i.name for i in reference_model.graph.input}
    for node_name, op, outputs in _topological_nodes(reference_model):
        for tensor in outputs:
            if tensor not in ref_values or tensor in graph_inputs:
                continue
            cand_name = mapping.get(tensor)
            if cand_name is None:
                report.skipped[tensor] = "no counterpart in the candidate"
                continue
            ref = ref_values[tensor]
            got, reason = _comparable(ref, cand_values[cand_name])
            if got is None:
                report.skipped[tensor] = reason
                continue
            producer = cand_producer.get(cand_name)
            origin = prov.node_origin.get(producer.name) if producer is not None else None
            rmse = metrics.normalized_rmse(ref, got)
            report.layers.append(LayerResult(
                index=len(report.layers), node=node_name, op=op, tensor=tensor,
                candidate_tensor=cand_name,
                candidate_node=producer.name if producer is not None else None,
                candidate_op=producer.op_type if producer is not None else None,
                by=origin["by"] if origin else UNCHANGED,
                rmse=rmse, max_abs=metrics.max_abs(ref, got), shape=[int(d) for d in ref.shape],
                above=math.isnan(rmse) or rmse > tolerance,
            ))
    report.seconds = time.perf_counter() - start
    return report
