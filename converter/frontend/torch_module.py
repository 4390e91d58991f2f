"""A live ``torch.nn.Module`` and its example inputs as ONNX, the way ``.pt2`` files go:
``torch.export`` then the dynamo exporter at torch's default opset (normalization brings it to
the canonical opset, converter/frontend/opsets).

    from converter.frontend.torch_module import load_module
    model = load_module(net, (torch.randn(1, 3, 224, 224),))     # onnx.ModelProto

Tracing runs the module's ``forward``: user code.  Where this process can fork (no threads
yet), the tracing and the export run in a forked child stopped after ``timeout`` seconds, as
torch files are (converter/frontend/isolate.py).  A process with threads cannot fork safely, and a
fresh interpreter cannot receive a live module: there ``torch.export`` traces the module here
(its code already runs in this process), and the program goes through the ``.pt2`` route, its
export in a child under the time limit.  The archive is written by this process from the
caller's own module, so loading it is not a pickle from an untrusted file.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import onnx

from ..errors import BadInput
from .load import _export, _one_line, _quiet_logging, _torch, load_exported_program, name_interface


def load_module(module, example_inputs, timeout: float | None = None, meanwhile=()) -> onnx.ModelProto:
    """``module`` (a ``torch.nn.Module``) traced on ``example_inputs`` (a tensor or a tuple of
    tensors, as ``torch.export.export`` takes them) -> ONNX, graph inputs named after
    ``forward``'s parameters, outputs as the dynamo exporter names them (as for a ``.pt2``)."""
    from .isolate import DEFAULT_TIMEOUT, can_fork, run_models

    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise BadInput(f"expected a torch.nn.Module, got {type(module).__name__}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        raise BadInput("example inputs must be a tensor or a tuple of tensors, one per forward argument")
    names = _argument_names(module, len(args))
    limit = DEFAULT_TIMEOUT if timeout is None else timeout
    what = f"{type(module).__name__}: tracing and exporting the torch module"
    if not limit or can_fork():
        return run_models(export_module, (module, args, names), limit, what, meanwhile)[0]
    from ..infra.fsutil import private_temp_dir

    with private_temp_dir("module") as tmp:  # marked: a killed run's is removed by the next
        path = Path(tmp) / f"{type(module).__name__}.pt2"
        torch.export.save(_trace(torch, module, args), str(path))
        model = run_models(load_exported_program, (path,), limit, what, meanwhile)[0]
    return name_interface(model, names, None)


def export_module(module, args, names) -> onnx.ModelProto:
    """The child's work: trace, export with the dynamo exporter, name the interface."""
    torch = _torch()
    program = _trace(torch, module, args)
    return name_interface(_export(torch, program, (), names, type(module).__name__, dynamo=True), names, None)


def _trace(torch, module, args):
    """``torch.export`` of the module in eval mode (its own mode restored afterwards)."""
    training = module.training
    try:
        with _quiet_logging():
            return torch.export.export(module.eval(), args)
    except Exception as err:
        raise BadInput(f"{type(module).__name__}: torch.export failed: {_one_line(err)}") from None
    finally:
        module.train(training)


def _argument_names(module, count: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input_{i}" for i in range(len(names), count)] if len(names) < count else names
