"""Benchmark: per-layer localization on a deep ResNet-like graph with hundreds of nodes.

edgeconv's localize exposes every intermediate tensor as an extra output and runs each graph
once; the naive peer approach (what one writes with onnx.utils.extract_model or by re-pointing
the graph output) builds and runs one onnxruntime session per intermediate tensor and graph.
Both must name the same guilty node; the script prints both timings and their ratio.

    .venv/bin/python benchmarks/bench_verify.py [--blocks 60] [--width 16] [--size 16]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from converter.ir.graph import NameAllocator, Provenance, provenance_of, to_graph, to_model  # noqa: E402
from converter.verify.localize import localize  # noqa: E402
from converter.verify import metrics  # noqa: E402
from converter.runtimes.onnxruntime import run_session, session  # noqa: E402


def deep_resnet(blocks: int = 60, width: int = 16, size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Stem conv, ``blocks`` residual blocks (Conv-Relu-Conv-Mul-Add-Relu, 6 nodes each), GAP and a
    Gemm head: ``6 * blocks + 5`` nodes, seeded He-scaled weights, opset 17, names like
    ``normalize`` gives (``conv_7``, output ``conv_7_1``)."""
    rng = np.random.default_rng(seed)
    graph = gs.Graph(opset=17)
    graph.metadata = {}  # what converter.ir.graph.to_graph sets; to_model reads it
    graph.provenance = Provenance()
    names = NameAllocator(graph)
    counts: dict[str, int] = {}

    def node(op, inputs, attrs=None, shape=None):
        k = counts.get(op, 0)
        counts[op] = k + 1
        name = names(f"{op.lower()}_{k}")
        out = gs.Variable(names(f"{name}_1"), dtype=np.float32, shape=shape)
        graph.nodes.append(gs.Node(op, name=name, attrs=attrs or {}, inputs=inputs, outputs=[out]))
        return out

    def conv(x, cin, cout):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (9 * cin))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        c = counts.get("Conv", 0)
        return node("Conv", [x, gs.Constant(names(f"conv_{c}_w"), w), gs.Constant(names(f"conv_{c}_b"), b)],
                    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [1, cout, size, size])

    x_in = gs.Variable("input", dtype=np.float32, shape=[1, 3, size, size])
    graph.inputs = [x_in]
    x = node("Relu", [conv(x_in, 3, width)], shape=[1, width, size, size])
    for _ in range(blocks):
        y = node("Relu", [conv(x, width, width)], shape=[1, width, size, size])
        y = conv(y, width, width)
        # Scale the residual branch down so activations stay O(1) through hundreds of blocks.
        y = node("Mul", [y, gs.Constant(names("branch_scale"), np.array(0.2, np.float32))], shape=[1, width, size, size])
        x = node("Relu", [node("Add", [x, y], shape=[1, width, size, size])], shape=[1, width, size, size])
    pooled = node("GlobalAveragePool", [x], shape=[1, width, 1, 1])
    flat = node("Flatten", [pooled], {"axis": 1}, shape=[1, width])
    w = (rng.standard_normal((10, width)) * 0.1).astype(np.float32)
    out = node("Gemm", [flat, gs.Constant("fc_w", w), gs.Constant("fc_b", np.zeros(10, np.float32))], {"transB": 1}, [1, 10])
    out.name = "output"
    graph.outputs = [out]
    model = to_model(graph, 17)
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def inject_sign_flip(model: onnx.ModelProto, conv_index: int, by: str = "faulty_rule") -> tuple[onnx.ModelProto, str]:
    """Negate the weight of the ``conv_index``-th Conv; record it as rule ``by`` would."""
    graph = to_graph(model)
    target = [n for n in graph.nodes if n.op == "Conv"][conv_index]
    weight = target.inputs[1]
    target.inputs[1] = gs.Constant(NameAllocator(graph)(weight.name + "_flipped"), -np.asarray(weight.values))
    provenance_of(graph).record_node(target.name, target.name, by)
    return to_model(graph), target.name


def naive_localize(reference: onnx.ModelProto, candidate: onnx.ModelProto, inputs: dict, tolerance: float):
    """The peer approach: one session per intermediate tensor per graph; returns (first node, count)."""
    cand_tensors = {o for n in candidate.graph.node for o in n.output}
    first, compared = None, 0
    for node in reference.graph.node:
        for tensor in node.output:
            if tensor not in cand_tensors:
                continue
            values = []
            for model in (reference, candidate):
                graph = to_graph(model)
                graph.outputs = [graph.tensors()[tensor]]
                values.append(run_session(session(to_model(graph)), inputs)[tensor])
            compared += 1
            if first is None and metrics.normalized_rmse(values[0], values[1]) > tolerance:
                first = node.name
    return first, compared


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=60)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--fault", type=float, default=0.6, help="depth of the faulty Conv, as a fraction")
    args = parser.parse_args(argv)

    reference = deep_resnet(args.blocks, args.width, args.size)
    convs = [n for n in reference.graph.node if n.op_type == "Conv"]
    candidate, guilty = inject_sign_flip(reference, int(args.fault * (len(convs) - 1)))
    inputs = {"input": np.random.default_rng(0).uniform(-1, 1, (1, 3, args.size, args.size)).astype(np.float32)}
    print(f"model: {len(reference.graph.node)} nodes, fault injected at {guilty}")

    t0 = time.perf_counter()
    report = localize(reference, candidate, inputs)
    ours = time.perf_counter() - t0
    first = report.first
    print(f"edgeconv localize: {ours:.2f} s, {len(report.layers)} layers compared, first diverging: "
          f"{first.node if first else None} ({first.by if first else '-'})")

    t0 = time.perf_counter()
    naive_first, naive_count = naive_localize(reference, candidate, inputs, report.tolerance)
    naive = time.perf_counter() - t0
    print(f"naive (one session per tensor): {naive:.2f} s, {naive_count} layers compared, first diverging: {naive_first}")
    print(f"speed-up: {naive / ours:.1f}x")
    agree = first is not None and first.node == guilty == naive_first
    print("both name the injected node" if agree else "MISMATCH: the methods disagree or missed the fault")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
