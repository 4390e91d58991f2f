"""The verification side of a port (:func:`converter.pipeline.port`): the stages it verifies and
the reference outputs it computes early, the integer file's judgement, the oracle it names, and
what its reason says when an architecture change makes it differ."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pipeline import PortOptions

def judge_integer_file(quant, target, runtime, artifact) -> tuple[str, str] | None:
    """Run the exported integer file (the real runtime when the user has one) and judge it
    against the float model (``quant.file_verification``); a runtime that refuses the file fails
    it, a reader that cannot run it leaves it unverified: (status, reason), or None."""
    from .errors import RuntimeUnavailable
    from .runtimes import ReaderCannotRun, RuntimeRefused, bind, oracle_of

    judge = bind(target, runtime)
    judged_by = oracle_of(judge, artifact)
    oracle = judged_by.name
    try:
        quant.file_verification = quant.evaluate_file(judge, artifact)
    except RuntimeRefused as err:
        return "verify_failed", f"{oracle}: {err}"
    except (ReaderCannotRun, RuntimeUnavailable) as err:
        return "unverified", f"the {quant.plan.mode} file is not verified ({oracle}: {err})"
    finally:
        quant.file_runtime = oracle
    # a target whose integer kernels only edgeconv's own reader ran here (MACE uint8) says so
    caveat = getattr(target, "integer_file_caveat", None)
    why = caveat(artifact, judged_by) if caveat is not None else None
    if why and quant.file_verification.ok:
        return "unverified", (f"the {quant.plan.mode} file is judged by {oracle} only "
                              f"({quant.file_verification.summary()}): {why}")
    return None


def oracle_name(target, artifact, runtime, verdict, hw: str = "") -> str:
    """What judged (or would judge) the target stage, for the summary and report.json."""
    if verdict is not None and verdict.target_oracle:
        return verdict.target_oracle
    from .runtimes import bind, builtin_oracle, oracle_of

    if artifact is None:  # nothing exported (unsupported): what would have judged it
        if runtime is not None:
            return runtime.oracle_name(hw)
        if target.name == "coreml":
            from .targets.coreml import _runtime_name

            return builtin_oracle(_runtime_name()).name
        return builtin_oracle(_BUILTIN_RUNTIME[target.name]).name if target.name in _BUILTIN_RUNTIME else ""
    return oracle_of(bind(target, runtime), artifact).name


#: The executor each built-in target's ``run`` uses on this machine (``Artifact.runtime``).
_BUILTIN_RUNTIME = {"tflite": "litert", "tnn": "tnn-reader+onnxruntime", "mace": "mace-reader+onnxruntime"}


def verify_port_stages(original, normalized, final, postprocess, target, artifact, opts: PortOptions, out: Path,
            custom_nodes=(), runtime=None, final_dir: Path | None = None, shared=None, legalized_runner=None):
    """Original vs normalized vs legalized(+post-processing) vs the target's runtime.

    A file carrying custom layers cannot run until the app registers their kernels, so its
    target stage is reported as skipped (the custom/ harnesses prove each kernel instead)."""
    from .verify.pipeline import verify_port
    from .verify.metrics import Tolerance
    from .verify.stages import Tolerances, load_tolerances

    tolerances = load_tolerances(opts.tolerances, opts.atol, opts.rtol)
    target_tolerances = None
    suggested = (artifact.meta or {}).get("suggested_tolerance") if artifact is not None else None
    if suggested and opts.tolerances is None and opts.atol is None and opts.rtol is None:
        # A reduced-precision target (CoreML on the Neural Engine computes in fp16) is judged by
        # the tolerance its exporter documents, never looser than the report-wide one.
        target_tolerances = Tolerances(
            default=Tolerance(atol=max(suggested["atol"], tolerances.default.atol),
                              rtol=max(suggested["rtol"], tolerances.default.rtol)),
            layer_rmse=tolerances.layer_rmse, noise_multiple=tolerances.noise_multiple)
    inputs = verify_samples(normalized, opts) if opts.inputs_npz else None
    from .runtimes import bind

    target = bind(target, runtime)
    if custom_nodes:
        target = _NeedsCustomKernels(target, custom_nodes)
    shown = final_dir or out
    return verify_port(
        _inputs_named_like(original, normalized), normalized, final,
        postprocess=postprocess.postprocess if postprocess is not None else None,
        target=target, artifact=artifact, inputs=inputs, seed=opts.seed, tolerances=tolerances,
        out_dir=out / "verify", replay_files=(shown / "normalized.onnx", shown / "legalized.onnx"),
        target_tolerances=target_tolerances, shown_dir=shown / "verify",
        target_replay=((shown / "normalized.onnx", shown / Path(artifact.files[0]).name)
                       if artifact is not None and postprocess is None and not custom_nodes else None),
        runtimes={target.name: str(runtime.path)} if runtime is not None else None,
        tolerances_path=opts.tolerances,
        reference_runners=shared.reference_runners() if shared is not None else None,
        legalized_runner=legalized_runner,
    )


def retrain_note(legal, opts: PortOptions) -> str:
    """Why a port with an architecture change (remedy 2) differs, and what to do about it."""
    from .rewrites import REGISTRY, RETRAIN

    changed = sorted({node for rule, node in legal.applied if REGISTRY[rule].kind == RETRAIN})
    if not changed:
        return ""
    head = (f"; expected of an architecture change: {', '.join(changed)} replaced by a block that "
            "computes a different function until it is trained on the model's data")
    if opts.retrain_hook:
        return head + " (the blocks your --retrain-hook returned)"
    errors = ", ".join(f"{r.layer} {r.error_after:.3g}" for r in legal.retrain_reports if r.layer)
    return (head + f" (the default fit on seeded inputs left held-out RMS error {errors}; fine-tune "
            "the blocks on your data with --retrain-hook pkg.module:function)")


def verify_samples(normalized, opts: PortOptions) -> list:
    """The input samples a port's verification runs (:func:`verify_port_stages` and ``verify_port`` choose
    the same ones: the ``--inputs`` file, else seeded random inputs)."""
    from .verify.pipeline import choose_inputs

    return choose_inputs(normalized, opts.inputs_npz, seed=opts.seed)[0]


def start_reference_runs(shared, normalized, opts: PortOptions) -> list | None:
    """Start computing the original's and the normalized model's outputs on the samples
    verification will run (:meth:`~converter.shared_work.SharedWork.prefetch`); returns those
    samples (None: a bad ``--inputs`` file, which verification reports itself)."""
    try:
        samples = verify_samples(normalized, opts)
    except Exception:  # noqa: BLE001 - verification reports a bad --inputs file itself
        return None
    shared.prefetch(shared.original, samples)
    shared.prefetch(shared.normalized, samples)
    return samples


def prefetch_legalized(shared, legalized, samples: list):
    """A memoized runner of the legalized model, started on ``samples`` in the worker thread."""
    from .shared_work import MemoRunner
    from .verify.runtime import onnx_runner

    # The default threads, as every other verification run: a report's numbers do not depend on
    # whether its outputs were computed early (onnxruntime's sums differ with the thread count).
    runner = MemoRunner(lambda: onnx_runner(legalized))
    shared.prefetch(runner, samples)
    return runner


def shared_work(preloaded):
    """The :class:`~converter.shared_work.SharedWork` of a preloaded (original, normalized) pair:
    pass it to every :func:`port` of that model."""
    from .shared_work import SharedWork

    original, normalized = preloaded[:2]
    return SharedWork(_inputs_named_like(original, normalized), normalized)


def _inputs_named_like(original, normalized):
    """The original model with its graph inputs renamed as normalization renamed them (names the
    edge formats cannot carry, like TF's ``image:0``), so one set of feeds runs every stage."""
    from .graph import to_graph, to_model

    inits = {i.name for i in normalized.graph.initializer}
    new = [i.name for i in normalized.graph.input if i.name not in inits]
    old_inits = {i.name for i in original.graph.initializer}
    old = [i.name for i in original.graph.input if i.name not in old_inits]
    if old == new or len(old) != len(new):
        return original
    graph = to_graph(original)
    by_name = {t.name: t for t in graph.inputs}
    for before, after in zip(old, new):
        by_name[before].name = after
    model = to_model(graph, cleanup=False)
    model.ir_version = original.ir_version
    return model


class _NeedsCustomKernels:
    def __init__(self, target, nodes):
        self.name, self.nodes, self.target = target.name, nodes, target

    def run(self, artifact, inputs):
        from .errors import RuntimeUnavailable

        raise RuntimeUnavailable(f"the file carries custom layer(s) {', '.join(self.nodes)}: register their "
                                 "kernels (see custom/) to run it; each harness checks its kernel")
