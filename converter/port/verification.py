"""The verification side of a port (:mod:`converter.port.pair`): the stages it verifies and
the reference outputs it computes early, the integer file's judgement, the oracle it names, and
what its reason says when an architecture change makes it differ."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..verify.spec import VerifySpec


def judge_integer_file(quant, target, runtime, artifact) -> tuple[str, str] | None:
    """Run the exported integer file (the real runtime when the user has one) and judge it
    against the float model (``quant.file_verification``); a runtime that refuses the file fails
    it, a reader that cannot run it leaves it unverified: (status, reason), or None."""
    from ..errors import RuntimeUnavailable
    from ..runtimes import ReaderCannotRun, RuntimeRefused
    from ..targets.oracles import bind, oracle_of

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
    from ..targets.oracles import bind, builtin_oracle, oracle_of

    if artifact is None:  # nothing exported (unsupported): what would have judged it
        if runtime is not None:
            return runtime.oracle_name(hw)
        executor = target.executor_name()
        return builtin_oracle(executor).name if executor else ""
    return oracle_of(bind(target, runtime), artifact).name


@dataclass(frozen=True)
class PortModels:
    """The models a port verifies, stage by stage."""

    original: object
    normalized: object
    #: The legalized (and, with post-processing, cut) model.
    final: object
    #: The split's result (``.postprocess``: the generated code's numpy twin), or None.
    postprocess: object = None


@dataclass(frozen=True)
class TargetUnderTest:
    """What the target stage runs: the exported files, by the user's runtime or the built-in one."""

    target: object = None
    artifact: object = None
    runtime: object = None
    custom_nodes: tuple[str, ...] = ()


def verify_port_stages(models: PortModels, judged: TargetUnderTest, spec: VerifySpec, out: Path,
                       final_dir: Path | None = None, shared=None, legalized_runner=None):
    """Original vs normalized vs legalized(+post-processing) vs the target's runtime.

    A file carrying custom layers cannot run until the app registers their kernels, so its
    target stage is reported as skipped (the custom/ harnesses prove each kernel instead).
    ``out``: the port's temporary directory; ``final_dir``: where it will be once in place."""
    from ..targets.oracles import bind
    from ..verify.pipeline import verify_port

    tolerances = spec.tolerance_profile()
    artifact, runtime = judged.artifact, judged.runtime
    target = bind(judged.target, runtime)
    if judged.custom_nodes:
        target = _NeedsCustomKernels(target, judged.custom_nodes)
    shown = final_dir or out
    return verify_port(
        _inputs_named_like(models.original, models.normalized), models.normalized, models.final,
        postprocess=models.postprocess.postprocess if models.postprocess is not None else None,
        target=target, artifact=artifact, inputs=spec.samples(models.normalized) if spec.inputs else None,
        seed=spec.seed, tolerances=tolerances, out_dir=out / "verify",
        replay_files=(shown / "normalized.onnx", shown / "legalized.onnx"),
        target_tolerances=_suggested_tolerances(artifact, spec, tolerances), shown_dir=shown / "verify",
        target_replay=((shown / "normalized.onnx", shown / Path(artifact.files[0]).name)
                       if artifact is not None and models.postprocess is None and not judged.custom_nodes else None),
        runtimes={target.name: str(runtime.path)} if runtime is not None else None,
        tolerances_path=spec.tolerances,
        reference_runners=shared.reference_runners() if shared is not None else None,
        legalized_runner=legalized_runner, ranges=spec.ranges,
    )


def _suggested_tolerances(artifact, spec: VerifySpec, tolerances):
    """A reduced-precision target (CoreML on the Neural Engine computes in fp16) is judged by
    the tolerance its exporter documents, never tighter than the report-wide one."""
    suggested = (artifact.meta or {}).get("suggested_tolerance") if artifact is not None else None
    if not suggested or spec.user_tolerances:
        return None
    from ..verify.metrics import Tolerance
    from ..verify.stages import Tolerances

    return Tolerances(default=Tolerance(atol=max(suggested["atol"], tolerances.default.atol),
                                        rtol=max(suggested["rtol"], tolerances.default.rtol)),
                      layer_rmse=tolerances.layer_rmse, noise_multiple=tolerances.noise_multiple)


def retrain_note(legal, retrain_hook: str | None) -> str:
    """Why a port with an architecture change (remedy 2) differs, and what to do about it."""
    from ..legalize.rewrites import REGISTRY, RETRAIN

    changed = sorted({node for rule, node in legal.applied if REGISTRY[rule].kind == RETRAIN})
    if not changed:
        return ""
    head = (f"; expected of an architecture change: {', '.join(changed)} replaced by a block that "
            "computes a different function until it is trained on the model's data")
    if retrain_hook:
        return head + " (the blocks your --retrain-hook returned)"
    errors = ", ".join(f"{r.layer} {r.error_after:.3g}" for r in legal.retrain_reports if r.layer)
    return (head + f" (the default fit on seeded inputs left held-out RMS error {errors}; fine-tune "
            "the blocks on your data with --retrain-hook pkg.module:function)")


def start_reference_runs(shared, normalized, spec: VerifySpec) -> list | None:
    """Start computing the original's and the normalized model's outputs on the samples
    verification will run (:meth:`~converter.port.shared_work.SharedWork.prefetch`); returns those
    samples (None: a bad ``--inputs`` file, which verification reports itself)."""
    try:
        samples = spec.samples(normalized)
    except Exception:  # noqa: BLE001 - verification reports a bad --inputs file itself
        return None
    shared.prefetch(shared.original, samples)
    shared.prefetch(shared.normalized, samples)
    return samples


def prefetch_legalized(shared, legalized, samples: list):
    """A memoized runner of the legalized model, started on ``samples`` in the worker thread."""
    from .shared_work import MemoRunner
    from ..runtimes.onnxruntime import onnx_runner

    # The default threads, as every other verification run: a report's numbers do not depend on
    # whether its outputs were computed early (onnxruntime's sums differ with the thread count).
    runner = MemoRunner(lambda: onnx_runner(legalized))
    shared.prefetch(runner, samples)
    return runner


def shared_work(original, normalized):
    """The :class:`~converter.port.shared_work.SharedWork` of a model: every port of it (one per
    target) shares its reference outputs."""
    from .shared_work import SharedWork

    return SharedWork(_inputs_named_like(original, normalized), normalized)


def _inputs_named_like(original, normalized):
    """The original model with its graph inputs renamed as normalization renamed them (names the
    edge formats cannot carry, like TF's ``image:0``), so one set of feeds runs every stage."""
    from ..ir.graph import to_graph, to_model

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
        from ..errors import RuntimeUnavailable

        raise RuntimeUnavailable(f"the file carries custom layer(s) {', '.join(self.nodes)}: register their "
                                 "kernels (see custom/) to run it; each harness checks its kernel")
