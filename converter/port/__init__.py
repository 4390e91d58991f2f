"""Stage 5, the port: one model to one or more framework x hardware pairs.

* :class:`~.session.PortSession` opens a model once, resolves ``--to``/``--hw`` words
  (:mod:`.resolve`) and runs each pair's stages (:class:`~.pair.PairPort`), sharing the load and
  the reference outputs between pairs;
* :class:`~.request.PortRequest` is what a port is asked (typed specs per stage), built from the
  flat option names of the CLI, a manifest entry or :func:`port`;
* :func:`~.outcome.decide` turns the stages' facts into the status, reason and exit code;
* :func:`port` is the one-call API on top.
"""

from __future__ import annotations

from .request import PortRequest
from .result import PortResult
from .session import PortSession

__all__ = ["PortRequest", "PortResult", "PortSession", "port"]


def port(model, example_inputs=None, *, to: str, hw: str | None = None, out="edgeconv-out", jobs: int = 1,
         progress=None, **flags):
    """Port ``model`` to ``to``/``hw`` and verify it; the :class:`PortResult`, or a list of them
    when the words name several targets (``all``, a class word such as TNN's ``npu``).

    ``model``: a model file path (``.pt2``, ``.onnx``, ``.pt``, TF/Keras/TFLite) or an
    ``onnx.ModelProto``; ``example_inputs``: for an in-memory torch module, its inputs (a tuple).
    ``flags``: the options by their flat names (:data:`converter.port.request.FLAGS`, as a batch
    manifest spells them): ``quantize="int8", calibration="calib.npz", runtimes={"tnn": path}``...
    With one target an error is raised (:mod:`converter.errors`); with several, a target that
    could not be ported is a result with ``status == "error"``."""
    request = PortRequest.from_flags(model, example_inputs=example_inputs, **flags) if example_inputs is not None \
        else PortRequest.from_flags(model, **flags)
    with PortSession.open(request) as session:
        results = session.run(session.resolve(to, hw), out, jobs=jobs, progress=progress)
    return results[0] if len(results) == 1 else results
