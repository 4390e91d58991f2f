"""``PortSession``: one model, opened once, ported to any number of framework x hardware pairs.

    with PortSession.open(PortRequest.from_flags("model.pt2", verify=True)) as session:
        pairs = session.resolve("tnn", "npu")          # [("tnn", "huawei_npu"), ("tnn", "rknpu"), ...]
        results = session.run(pairs, "out")            # one PortResult per pair

The session loads and normalizes the model once (its big weights held once,
:mod:`converter.ir.weights`), computes the reference outputs verification compares with once
(:class:`~converter.port.shared_work.SharedWork`), and runs each pair's stages
(:class:`~converter.port.pair.PairPort`) in that pair's own output directory, written
atomically.  ``edgeconv port``, ``edgeconv batch`` (one session per model) and the Python API
(:func:`converter.port.port`) all port through it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import BadInput, EdgeconvError
from ..infra.fsutil import sha256_file
from ..infra.outdirs import check_output_dir, output_collection, replace_output_dir
from .request import PortRequest
from .result import PortResult

#: ``progress(framework, hw, stage)``: called as each stage of a pair starts.
Progress = Callable[[str, str, str], None]


class PortSession:
    def __init__(self, request: PortRequest, matrix):
        self.request, self.matrix = request, matrix
        self.seed = request.verify.seed if request.verify is not None else 0
        path = request.source.path
        self.model_label = path if path is not None else "<onnx model>"
        self.model_name = _model_name(path, request.source.model)
        self.model_sha256: str | None = None
        self.loads = 0  # how many times the model was loaded (tests and benchmarks read it)
        self._loaded = None  # (original, normalized, seconds, heavy)
        self._store = self._shared = None
        self._held = contextlib.ExitStack()

    @classmethod
    def open(cls, request: PortRequest | None = None, /, **flags) -> PortSession:
        """A session for ``request`` (or ``PortRequest.from_flags(model, **flags)``); every
        option is checked here, before anything is loaded (one BadInput line per mistake)."""
        if request is None:
            request = PortRequest.from_flags(flags.pop("model"), **flags)
        request.validate()
        return cls(request, request.matrix.load())

    @classmethod
    def with_models(cls, request: PortRequest, original, normalized, seconds: float = 0.0) -> PortSession:
        """A session over models already loaded and normalized (benchmarks, tests, a caller that
        normalized once): ``seconds`` is reported as the ports' load+normalize time.  The models
        hold their weights' bytes (no weight store)."""
        from ..ir.memory import RELEASE_MIN_BYTES, weight_bytes

        session = cls.open(request)
        session._loaded = (original, normalized, seconds, weight_bytes(normalized) >= RELEASE_MIN_BYTES)
        if request.verifies:
            from .verification import shared_work

            session._shared = shared_work(original, normalized)
        return session

    @property
    def shared(self):
        """The reference outputs shared by this session's ports (None without verification)."""
        return self._shared

    def __enter__(self) -> PortSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Drop the loaded models, the weight store and the shared reference outputs."""
        self._held.close()
        self._loaded = self._store = self._shared = None

    # ------------------------------------------------------------------------------ resolve

    def resolve(self, to: str, hw: str | None = None) -> list[tuple[str, str]]:
        """``--to``/``--hw`` as users type them -> [(framework, hardware)].

        ``to``: a framework or ``all``; ``hw``: a hardware word (``cpu``, ``gpu``, ``npu``, ``dsp``,
        a unit's own name), ``all``, or None: each framework's CPU.  A class word naming several
        units of one framework (TNN's ``npu``: huawei_npu, rknpu, apple_npu) gives each of them."""
        from .resolve import resolve_pairs

        return resolve_pairs(self.matrix, to, hw)

    # ---------------------------------------------------------------------------------- run

    def run(self, pairs, out_dir, jobs: int = 1, progress: Progress | None = None,
            dirs: Callable[[str, str], Path] | None = None) -> list[PortResult]:
        """Port to every pair.  Output: ``out_dir`` itself for one pair, ``out_dir/<fw>-<hw>``
        for several (or ``dirs(fw, hw)``).  Up to ``jobs`` pairs run at once (threads: the heavy
        parts -- onnxruntime, LiteRT, numpy -- release the GIL).  With one pair an error is
        raised; with several, a pair that fails is a :meth:`PortResult.failed` and the others go on."""
        pairs = list(pairs)
        many = len(pairs) > 1
        claim = contextlib.nullcontext()
        if dirs is None:
            dirs = (lambda fw, hw: Path(out_dir) / f"{fw}-{hw}") if many else (lambda fw, hw: Path(out_dir))
            # before any work: a directory edgeconv may write (converter/infra/ownership.py); one
            # pair replaces it, several write one directory each into it (held, locked)
            claim = output_collection(out_dir) if many else contextlib.nullcontext(check_output_dir(out_dir))
        with claim:
            return self._run(pairs, many, dirs, jobs, progress)

    def _run(self, pairs, many: bool, dirs, jobs: int, progress) -> list[PortResult]:
        self.load([fw for fw, _ in pairs])

        def one(fw, hw):
            step = (lambda stage: progress(fw, hw, stage)) if progress is not None else None
            try:
                return self.port_pair(fw, hw, dirs(fw, hw), step)
            except EdgeconvError as err:
                if not many:
                    raise
                return PortResult.failed(fw, hw, dirs(fw, hw), err)
            except Exception as err:  # noqa: BLE001 - one broken pair must not hide the others
                if not many:
                    raise
                return PortResult.failed(fw, hw, dirs(fw, hw),
                                         EdgeconvError(f"internal error: {type(err).__name__}: {err}"))

        if jobs > 1 and many:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="port") as pool:
                return list(pool.map(lambda pair: one(*pair), pairs))
        return [one(fw, hw) for fw, hw in pairs]

    def load(self, frameworks=()) -> tuple:
        """Load and normalize once: (original, normalized).  ``frameworks``: the targets the
        session will port to (their imports overlap a torch model's load in its child)."""
        if self._loaded is None:
            from ..ir import weights
            from ..ir.memory import RELEASE_MIN_BYTES, weight_bytes
            from .loading import BY_REFERENCE_TARGETS, load_stage, preload_steps

            request = self.request
            if request.source.timeout is not None:
                from ..infra.limits import set_time_limit

                set_time_limit(request.source.timeout)  # user code and each inference
            runs_models = request.verifies or request.quant.mode is not None
            start = time.perf_counter()
            # big weights held once, alive while the ports run; for the other targets (and
            # quantization) each port gets models holding their bytes
            store = weights.WeightStore() if request.quant.mode is None and any(
                fw in BY_REFERENCE_TARGETS for fw in frameworks) else None
            original, normalized = load_stage(request.source, runs_models, preload_steps(frameworks, request.verifies),
                                              store)
            self.loads += 1
            if request.verify is not None and request.verify.ranges:  # names and types now known
                from ..frontend.declared_inputs import check_declared

                check_declared(normalized, {}, request.verify.ranges)
            self._store = weights.store_of(normalized)
            path = request.source.path
            if path is not None and Path(path).is_file():  # hashed while it loaded (converter/frontend/load.py)
                self.model_sha256 = sha256_file(path)
            heavy = weight_bytes(normalized) >= RELEASE_MIN_BYTES
            self._loaded = (original, normalized, round(time.perf_counter() - start, 4), heavy)
            if request.verifies and (len(set(frameworks)) > 1 or not heavy):
                from .verification import shared_work

                self._shared = shared_work(original, normalized)
        return self._loaded[:2]

    def port_pair(self, framework: str, hw: str, out_dir: Path, progress=None, verify=None) -> PortResult:
        """One pair's stages into ``out_dir`` (replaced as a whole when the port finished).
        ``verify``: a :class:`~converter.verify.spec.VerifySpec` for this pair instead of the
        request's (per-target tolerances; it must verify when the request does)."""
        from .. import targets
        from ..ir import weights
        from ..quantize.port import plan_for_port
        from .loading import BY_REFERENCE_TARGETS
        from .pair import PairPort, StageTimer

        if framework not in self.matrix.frameworks:
            raise BadInput(f"unknown framework '{framework}'")
        original, model = self.load([framework])
        _, _, seconds, heavy = self._loaded
        from ..quantize.given import given_dtype

        # before anything is written; a quantized input keeps its own scales
        quant_plan = plan_for_port(self.request.quant, self.matrix, framework, hw, given_dtype(model),
                                   targets.get(framework) if framework in targets.names() else None)
        timer = StageTimer(progress, heavy)
        timer.timings["load+normalize"] = seconds
        with replace_output_dir(Path(out_dir)) as tmp, contextlib.ExitStack() as held:
            store = self._store
            if store is not None and (quant_plan is not None or framework not in BY_REFERENCE_TARGETS):
                original, model, store = weights.materialized(original), weights.materialized(model), None
            if store is not None:
                held.enter_context(weights.holding(store))
            pair = PairPort(self, framework, hw, tmp, Path(out_dir), timer, verify)
            return pair.run(original, model, self._shared, quant_plan)


def _model_name(path: str | None, model) -> str:
    from .pair import model_name

    if path is None:
        return model_name(getattr(getattr(model, "graph", None), "name", None) or "model")
    return model_name(path)
