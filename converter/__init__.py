"""edgeconv: take a trained model to an edge framework that can run it."""

__version__ = "0.1.0"


def port_module(module, example_inputs, to: str, hw: str | None = None, out_dir="edgeconv-out", **options):
    """Port a live ``torch.nn.Module`` traced on ``example_inputs`` (a tensor or a tuple of
    tensors) to framework ``to`` (``tflite``, ``tnn``, ``mace``, ``coreml``) on hardware ``hw``
    (default: the framework's CPU); returns the :class:`~converter.port.pipeline.PortResult`.

    A thin entry on today's pipeline: the module goes through ``torch.export`` and the dynamo
    exporter (converter/frontend/torch_module.py), then exactly what ``edgeconv port`` runs on a
    file (``options`` are :class:`~converter.port.pipeline.PortOptions` fields, e.g.
    ``runtimes={"tnn": "/path/to/tnn_run"}``, ``verify=False``)."""
    from pathlib import Path

    from .frontend.normalize import dynamic_inputs, normalize
    from .frontend.torch_module import load_module
    from .errors import BadInput
    from .port.pipeline import PortOptions, port

    opts = PortOptions(target=to, hw=hw or "", out_dir=Path(out_dir), **options)
    original = load_module(module, example_inputs, timeout=opts.timeout)
    normalized = normalize(original)
    problems = dynamic_inputs(normalized)
    if problems:
        raise BadInput(problems[0])
    return port(f"<{type(module).__name__} module>", opts, preloaded=(original, normalized))
