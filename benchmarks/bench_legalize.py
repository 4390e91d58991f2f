"""How legalize's time grows with the graph: synthetic block stacks of 100 ... 5,000 nodes.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_legalize.py [--sizes 100,300,1000,2000,5000]
        [--repeat 3] [--to tnn --hw arm] [--real] [--plot legalize.png] [--no-assert]

Each synthetic model (benchmarks/legalize_models.py) is a stack of ConvNeXt-style blocks of 15
nodes with one exact GELU each, so the rewrites grow with the size: on ``tnn``/``arm`` every Erf
is rewritten (``erf_polynomial``), on ``mace``/``cpu`` every LayerNormalization
(``layernorm_decompose``; MACE has no legal chain for Erf, which stays a custom layer).  For each
size the script prints the median time of ``legalize`` (planning, rewriting, the onnxruntime
check; CPU time of this process, the wall time beside it), the time per node and per rewrite, the
ratio to the previous size, and what was done:
rule trials run (the rest were reused) and whole-model shape inferences.  It fits the growth
exponent (slope of log time over log nodes) and asserts that it is at most 1.2 (about linear),
and that the ~300-node model with 20 rewrites legalizes in under a second.  ``--real`` adds
ConvNeXt- and Swin-style stacks written in torch and exported to ONNX (legalize_models.py).

The converter on ``PYTHONPATH`` is the one measured (this checkout when none is set), so the same
script times an older checkout: ``PYTHONPATH=/path/to/old python benchmarks/bench_legalize.py``.
A plot is written with ``--plot`` when matplotlib is installed (it is not a dependency).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # after PYTHONPATH: an older checkout given there is the one timed

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import legalize_models as models  # noqa: E402
from converter.legalize import legalize as legalize_mod  # noqa: E402
from converter.matrix import load_matrix  # noqa: E402
from converter.frontend.normalize import normalize  # noqa: E402

MAX_EXPONENT = 1.2
BUDGET_300 = 1.0  # seconds for ~300 nodes with 20 rewrites


class Work:
    """Counts ONNX shape inferences (whole-model ones: at least half the model's nodes) and
    rule trials during one legalize call."""

    def __init__(self):
        self.whole = self.small = self.trials = 0
        self._nodes = 0
        self._infer = onnx.shape_inference.infer_shapes
        self._plan = getattr(legalize_mod, "ChainSearch", None)

    def __enter__(self):
        work = self

        def counting(model, *args, **kwargs):
            if len(model.graph.node) * 2 >= work._nodes:
                work.whole += 1
            else:
                work.small += 1
            return work._infer(model, *args, **kwargs)

        onnx.shape_inference.infer_shapes = counting
        if self._plan is not None:
            original = self._plan

            class Counting(original):
                def __init__(self, *a, **k):
                    super().__init__(*a, **k)
                    work._search = self

            legalize_mod.ChainSearch = Counting
        return self

    def start(self, nodes: int):
        self._nodes = nodes
        self.whole = self.small = 0
        self._search = None

    def stop(self):
        self.trials = getattr(self._search, "trials", None)

    def __exit__(self, *exc):
        onnx.shape_inference.infer_shapes = self._infer
        if self._plan is not None:
            legalize_mod.ChainSearch = self._plan


def time_legalize(model: onnx.ModelProto, fw: str, hw: str, matrix, repeat: int, work: Work):
    """(median CPU seconds, median wall seconds, result).  CPU time (all threads of this
    process) is what the assertions use: on a shared machine the wall time mostly measures the
    other processes."""
    data = model.SerializeToString()
    cpu, wall = [], []
    for _ in range(repeat):
        fresh = onnx.load_from_string(data)
        work.start(len(model.graph.node))
        start, start_cpu = time.perf_counter(), time.process_time()
        result = legalize_mod.legalize(fresh, fw, hw, matrix)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start)
        work.stop()
    return statistics.median(cpu), statistics.median(wall), result


def synthetic_rows(sizes, fw, hw, matrix, repeat, work):
    rows = []
    print(f"legalize --to {fw} --hw {hw}: synthetic ConvNeXt-style stacks (median of {repeat})")
    print(f"{'nodes':>6} {'rewrites':>8} {'cpu s':>8} {'wall s':>8} {'ms/node':>8} {'ms/rewr':>8} "
          f"{'x time':>7} {'x nodes':>7} {'trials':>6} {'whole-inf':>9} {'small-inf':>9}")
    for target in sizes:
        model = normalize(models.synthetic_model(models.blocks_for(target)))
        n = len(model.graph.node)
        seconds, wall, result = time_legalize(model, fw, hw, matrix, repeat, work)
        k = len(result.applied)
        prev = rows[-1] if rows else None
        ratio_t = f"{seconds / prev[2]:7.2f}" if prev else f"{'':7}"
        ratio_n = f"{n / prev[0]:7.2f}" if prev else f"{'':7}"
        trials = "-" if work.trials is None else str(work.trials)
        print(f"{n:6d} {k:8d} {seconds:8.3f} {wall:8.3f} {1e3 * seconds / n:8.3f} "
              f"{(1e3 * seconds / k if k else float('nan')):8.2f} {ratio_t} {ratio_n} {trials:>6} "
              f"{work.whole:9d} {work.small:9d}", flush=True)
        rows.append((n, k, seconds))
    return rows


def growth_exponent(rows) -> float:
    nodes = np.log([r[0] for r in rows])
    secs = np.log([r[2] for r in rows])
    return float(np.polyfit(nodes, secs, 1)[0])


def plot(series: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no plot: matplotlib is not installed; {path} not written)")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, rows in series.items():
        ax.loglog([r[0] for r in rows], [r[2] for r in rows], "o-", label=label)
        for n, k, s in rows:
            ax.annotate(f"{k}", (n, s), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set_xlabel("nodes (labels: rewrites)")
    ax.set_ylabel("legalize CPU seconds (median)")
    ax.set_title("legalize time vs graph size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def real_models(matrix, repeat, work) -> None:
    print(f"torch-exported stacks (median of {repeat})")
    print(f"{'model':10} {'target':10} {'nodes':>6} {'rewrites':>8} {'cpu s':>8} {'wall s':>8} {'trials':>6} "
          f"{'whole-inf':>9}")
    for name, build in (("convnext", models.convnext_model), ("swin", models.swin_model)):
        model = normalize(build())
        for fw, hw in (("tnn", "arm"), ("mace", "cpu")):
            seconds, wall, result = time_legalize(model, fw, hw, matrix, repeat, work)
            trials = "-" if work.trials is None else str(work.trials)
            print(f"{name:10} {fw + '/' + hw:10} {len(model.graph.node):6d} {len(result.applied):8d} "
                  f"{seconds:8.3f} {wall:8.3f} {trials:>6} {work.whole:9d}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,300,1000,2000,5000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--to", default=None, help="one framework (default: tnn/arm and mace/cpu)")
    ap.add_argument("--hw", default=None)
    ap.add_argument("--real", action="store_true", help="also the torch ConvNeXt/Swin stacks")
    ap.add_argument("--plot", default=None, help="PNG path (needs matplotlib)")
    ap.add_argument("--no-assert", action="store_true", help="print only (e.g. for an older checkout)")
    args = ap.parse_args()
    matrix = load_matrix()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    targets = [(args.to, args.hw or "cpu")] if args.to else [("tnn", "arm"), ("mace", "cpu")]
    failures = []
    series = {}
    with Work() as work:
        # The issue's yardstick first: ~300 nodes, 20 rewrites.
        model = normalize(models.synthetic_model(20))
        seconds, wall, result = time_legalize(model, "tnn", "arm", matrix, args.repeat, work)
        print(f"yardstick: {len(model.graph.node)} nodes, {len(result.applied)} rewrites on tnn/arm: "
              f"{seconds:.3f} s CPU, {wall:.3f} s wall (budget {BUDGET_300:g} s CPU)\n")
        if seconds >= BUDGET_300:
            failures.append(f"300-node/20-rewrite model took {seconds:.3f} s >= {BUDGET_300:g} s")
        for fw, hw in targets:
            rows = synthetic_rows(sizes, fw, hw, matrix, args.repeat, work)
            series[f"{fw}/{hw}"] = rows
            if len(rows) >= 2:
                slope = growth_exponent(rows)
                print(f"growth exponent (log-log slope): {slope:.2f} (limit {MAX_EXPONENT})\n")
                if slope > MAX_EXPONENT:
                    failures.append(f"{fw}/{hw}: time grows like nodes^{slope:.2f} > nodes^{MAX_EXPONENT}")
        if args.real:
            real_models(matrix, args.repeat, work)
    if args.plot:
        plot(series, Path(args.plot))
    if failures and not args.no_assert:
        for f in failures:
            print("FAIL:", f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
