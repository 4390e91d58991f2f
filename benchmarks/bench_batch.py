"""`edgeconv batch` of one model x N targets against N batches of one target each, in one run.

    .venv/bin/python benchmarks/bench_batch.py [--model resnet] [--size test|full] [--runs 3]

A batch opens one PortSession per model (converter/batch/jobs.py): the model's targets share its
load, its normalization and the reference outputs verification compares with.  The model is
saved as TorchScript (the load is a child process exporting it, the cost the sharing saves).
Printed: the wall time of one batch holding all N targets, of N batches of one target each (a
fresh process each, as N single jobs would run), the ratio (goal < 1: N targets of one model cost
less than N single ports) and the loads counted in each.  Medians of ``--runs``; wall times on
a shared machine: compare the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGETS = [("tflite", "cpu"), ("tnn", "arm"), ("mace", "cpu"), ("coreml", "cpu")]


def save_model(name: str, size: str, path: Path) -> list[str]:
    """The zoo model as TorchScript; returns its input shape flags."""
    import inspect

    import torch

    from converter.demo import zoo

    net, shapes = zoo.build(name, size=size), zoo.input_shapes(name, size=size)
    torch.jit.save(torch.jit.trace(net, tuple(torch.zeros(s) for s in shapes.values())), str(path))
    names = [n for n in inspect.signature(net.forward).parameters if n != "self"]
    return [f"{n}: [{', '.join(map(str, s))}]" for n, s in zip(names, shapes.values())]


def manifest(path: Path, model: Path, shapes: list[str], targets) -> Path:
    lines = ["targets:"] + [f"  - {{to: {fw}, hw: {hw}}}" for fw, hw in targets]
    lines += ["models:", f"  - path: {model}", "    input_shapes:"] + [f"      {s}" for s in shapes]
    path.write_text("\n".join(lines) + "\n")
    return path


def timed_batch(manifest_path: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "converter", "batch", str(manifest_path), "-o", str(out), "--force"],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 6):
        raise SystemExit(f"batch failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet")
    ap.add_argument("--size", default="test", choices=["test", "full"])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tmp / f"{args.model}.pt"
        shapes = save_model(args.model, args.size, model)
        together = manifest(tmp / "all.yaml", model, shapes, TARGETS)
        alone = [manifest(tmp / f"{fw}-{hw}.yaml", model, shapes, [(fw, hw)]) for fw, hw in TARGETS]
        timed_batch(alone[0], tmp / "warmup")
        shared, separate = [], []
        for run in range(args.runs):
            shared.append(timed_batch(together, tmp / f"together-{run}"))
            separate.append(sum(timed_batch(m, tmp / f"alone-{run}-{i}") for i, m in enumerate(alone)))
        one, many = statistics.median(shared), statistics.median(separate)
        print(f"{args.model} ({args.size}, TorchScript) x {len(TARGETS)} targets "
              f"({', '.join(f'{fw}/{hw}' for fw, hw in TARGETS)}), medians of {args.runs}")
        print(f"  one batch, {len(TARGETS)} targets (1 load):     {one:7.2f} s")
        print(f"  {len(TARGETS)} batches, one target each ({len(TARGETS)} loads): {many:7.2f} s")
        print(f"  ratio: {one / many:.2f}  (goal < 1)")


if __name__ == "__main__":
    main()
