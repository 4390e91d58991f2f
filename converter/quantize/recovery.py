"""What keeping a layer in float would recover at the outputs, measured.

The per-layer table (:mod:`.debug`) charges each layer the SQNR it loses locally: its output's
SQNR against its inputs'.  A large local drop need not matter at the outputs (the HED edge
detector: ``conv_2`` loses 8.0 dB locally; kept in float, the held-out output SQNR rises by
0.4 dB).  So for the :data:`TOP_CANDIDATES` rows with the largest local drops (at least
:data:`.debug.DIAGNOSE_DROP_DB`), edgeconv quantizes the model again with that layer in float
(``nodes_to_exclude``: the layer and the nodes reading its output, so the tensor stays float,
as ``auto``'s keep-float remedy does; the same ranges, range layout and bias correction as the
model itself), runs it on the first :data:`SAMPLES` held-out samples and records, per row,
``recovered_db``: the worst output's median SQNR with the layer in float minus without.  The
table then ranks those rows by it (:meth:`.debug.LayerTable.ranked`).

Nothing is measured when the outputs are already above the table's baseline (40 dB for int8:
what 8 bits give one bell-shaped tensor, :data:`.debug.BASELINE_SQNR_DB`): such a model has no
layer worth keeping in float, and each variant is a full quantization (ResNet-18 at 224x224,
47 dB: three variants were 3.4 s, a sixth of the quantize stage, for gains of about 1 dB).

Before / after for one candidate row ``conv_2`` (``conv_3`` reads its output)::

    DQ -> conv_2(DQ(w2)) -> Q -> DQ -> conv_3(DQ(w3)) -> Q       (the port's model)
    DQ -> conv_2(w2) ----------------> conv_3(w3) -> Q             (the measured variant)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from .debug import DIAGNOSE_DROP_DB, INPUT_OP, LayerRow, LayerTable

TOP_CANDIDATES = 3
#: Held-out samples each variant runs on (the base model's outputs on them are already known): a
#: diagnosis ranking the worst few layers, not a verdict.
SAMPLES = 4


@dataclass
class Variant:
    row: LayerRow
    nodes: tuple[str, ...]
    model: onnx.ModelProto


def keep_float_nodes(model: onnx.ModelProto, row: LayerRow) -> tuple[list[str], list[str]]:
    """(the row's nodes, the nodes reading its tensor): what stays float so that the tensor does."""
    readers = sorted(n.name for n in model.graph.node if row.tensor in n.input)
    return list(row.nodes), readers


def candidates(table: LayerTable, top: int = TOP_CANDIDATES) -> list[LayerRow]:
    """The rows worth measuring: the largest local drops, layers (not graph inputs) only."""
    return [r for r in table.worst(top) if r.drop_db >= DIAGNOSE_DROP_DB and r.op != INPUT_OP and r.nodes]


def measure(model: onnx.ModelProto, table: LayerTable, base: onnx.ModelProto, variant: Callable,
            judge, excluded: tuple[str, ...] = (), top: int = TOP_CANDIDATES,
            samples: int = SAMPLES) -> list[Variant]:
    """Fill ``recovered_db`` of ``table``'s candidate rows; returns the measured variants.
    ``variant(nodes_to_exclude) -> quantized model`` builds the model with those nodes in float
    (``excluded``: what the base model already keeps in float); ``judge``: the held-out samples."""
    measured = []
    count = min(samples, len(judge.held))
    if not count:
        return measured
    before = judge.score(base, count)
    if before >= table.baseline_sqnr_db:
        table.unmeasured = (f"keep-float gains not measured: the outputs are at {before:.1f} dB on "
                            f"{judge.score_label(count)}, above the {table.baseline_sqnr_db:g} dB the format "
                            "gives one tensor")
        return measured
    for row in candidates(table, top):
        own, readers = keep_float_nodes(model, row)
        nodes = tuple(sorted(set(excluded) | set(own) | set(readers)))
        candidate = variant(nodes)
        row.recovered_db = judge.score(candidate, count) - before
        row.recovered_on = judge.score_label(count)
        row.kept_float_with = readers
        judge.release(candidate)
        measured.append(Variant(row, nodes, candidate))
    table.measured_on = judge.score_label(count) if measured else ""
    return measured


def measure_model(model: onnx.ModelProto, table: LayerTable, quantized: onnx.ModelProto, config, ranges,
                  calibration: list[dict], stats, judge) -> list[Variant]:
    """:func:`measure` for ``quantized`` (made by :func:`.qdq.quantize_model` with ``config``,
    ``ranges`` and ``calibration``): each variant quantized alike, with the bias correction
    choice ``quantized`` records (:func:`.params.bias_correction_record`), not scored again."""
    from dataclasses import replace

    from .params import bias_correction_record
    from .qdq import quantize_model

    choice = bias_correction_record(quantized)

    def variant(nodes):
        return quantize_model(model, replace(config, nodes_to_exclude=nodes), ranges, calibration or None, stats,
                              bias_choice=choice)

    return measure(model, table, quantized, variant, judge, config.nodes_to_exclude)
