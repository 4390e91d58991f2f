"""The retraining hook: the ConvTranspose replacement as torch modules, the swap, the fitting.

Python API (``edgeconv port --retrain-hook pkg.module:function`` uses the same calls)::

    from converter.legalize.rewrites import retrain
    swaps = retrain.swap_conv_transpose(model, mode="subpixel")   # or "resize_conv"
    hook = retrain.load_hook("pkg.module:function")               # BadInput on a bad spec
    model = retrain.apply_retrain_hook(model, hook, mode="resize_conv")

* :class:`SubPixelConvTranspose` — Conv (Cout·∏s channels) + depth-to-space + crop, the exact
  replacement (:func:`converter.legalize.rewrites.convtranspose.convtranspose_to_subpixel`); initialized
  from the ConvTranspose it replaces it computes the same function, and trains like any Conv.
* :class:`ResizeConv` — nearest upsampling + Conv, the ``retrain`` replacement
  (:func:`converter.legalize.rewrites.convtranspose.convtranspose_to_resize_conv`); its initial weights
  are only an approximation, so it must be fitted.
* :func:`apply_retrain_hook` swaps every ``nn.ConvTranspose1d/2d`` and then calls the user's
  hook (their own fine-tuning: ``hook(model) -> model``), or, with no hook, the default:
  :func:`distill_layer` fits each non-exact replacement to the layer it replaced on generated
  (or calibration) inputs and records the residual error in ``model.edgeconv_retrain_report``.
torch is imported lazily, inside these functions.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from ...ir.conv_math import conv_columns, conv_transpose_full
from ...errors import BadInput
from .convtranspose import (TransposeGeometry, resize_conv_geometry, resize_conv_init,
                            subpixel_weights)


def _torch():
    import torch

    return torch


def _geometry_of(layer, in_size) -> TransposeGeometry:
    nd = len(layer.kernel_size)
    full = [s * (n - 1) + a + d * (k - 1) + 1 for s, n, a, d, k in zip(
        layer.stride, in_size, layer.output_padding, layer.dilation, layer.kernel_size)]
    out = [f - 2 * p for f, p in zip(full, layer.padding)]
    return TransposeGeometry(tuple(in_size), tuple(layer.kernel_size), tuple(layer.stride),
                             tuple(layer.dilation), tuple(layer.padding)[:nd], tuple(out), layer.groups)


def _check_layer(layer) -> None:
    if isinstance(layer.padding, str) or getattr(layer, "padding_mode", "zeros") != "zeros":
        raise BadInput(f"{type(layer).__name__}: only numeric zero padding can be replaced")


def _subpixel_class():
    """The exact replacement's torch module class, defined when a module is built (importing
    this file must not import torch)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class SubPixelConvTranspose(nn.Module):
        """Exact replacement: stride-1 Conv → depth-to-space (reshape/permute) → crop."""

        def __init__(self, layer):
            super().__init__()
            _check_layer(layer)
            nd = len(layer.kernel_size)
            self.stride = tuple(layer.stride)
            self.pad_begin = tuple(layer.padding)
            self.out_channels = layer.out_channels
            # Geometry facts independent of the input size (see convtranspose.py): taps, the
            # trailing padding and how much of the rearranged output lies past the window.
            probe = _geometry_of(layer, [8] * nd)
            self.taps, self.pad_end = probe.taps, probe.conv_pad_end
            self.tail = tuple((8 + e) * s - b - o for e, s, b, o in zip(
                probe.conv_pad_end, probe.stride, probe.pad_begin, probe.out_size))
            w, b = subpixel_weights(layer.weight.detach().cpu().numpy(),
                                    None if layer.bias is None else layer.bias.detach().cpu().numpy(), probe)
            conv = (nn.Conv1d if nd == 1 else nn.Conv2d)(
                layer.in_channels, w.shape[0], self.taps, groups=layer.groups, bias=b is not None)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(w))
                if b is not None:
                    conv.bias.copy_(torch.from_numpy(b))
            self.conv = conv

        def forward(self, x):
            nd = len(self.stride)
            pad = []
            for t, e in zip(reversed(self.taps), reversed(self.pad_end)):
                pad += [t - 1, e]
            y = self.conv(F.pad(x, pad))
            n, sizes = y.shape[0], list(y.shape[2:])
            y = y.reshape([n, self.out_channels, *self.stride, *sizes])
            perm = [0, 1] + [a for i in range(nd) for a in (2 + nd + i, 2 + i)]
            y = y.permute(perm).reshape([n, self.out_channels] + [h * s for h, s in zip(sizes, self.stride)])
            for axis, (b, tail) in enumerate(zip(self.pad_begin, self.tail)):
                y = y.narrow(2 + axis, b, y.shape[2 + axis] - b - tail)
            return y

    return SubPixelConvTranspose


def _resize_conv_class():
    """The retrain replacement's torch module class, defined when a module is built."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class ResizeConv(nn.Module):
        """Retrain replacement: nearest upsampling by the stride, then a Conv, then a crop."""

        def __init__(self, layer):
            super().__init__()
            _check_layer(layer)
            nd = len(layer.kernel_size)
            self.stride = tuple(layer.stride)
            probe = _geometry_of(layer, [8] * nd)
            rc = resize_conv_geometry(probe)
            self.pads, self.crop_begin = rc.pads, rc.crop_begin
            # Output length = s·n + extra, with extra independent of n.
            self.extra = tuple(o - 8 * s for o, s in zip(probe.out_size, probe.stride))
            w = resize_conv_init(layer.weight.detach().cpu().numpy(), layer.groups, layer.stride)
            conv = (nn.Conv1d if nd == 1 else nn.Conv2d)(
                layer.in_channels, layer.out_channels, layer.kernel_size, dilation=layer.dilation,
                groups=layer.groups, bias=layer.bias is not None)
            with torch.no_grad():
                conv.weight.copy_(torch.from_numpy(w))
                if layer.bias is not None:
                    conv.bias.copy_(layer.bias.detach())
            self.conv = conv

        def forward(self, x):
            nd = len(self.stride)
            y = F.interpolate(x, scale_factor=self.stride, mode="nearest")
            pad = []
            for i in reversed(range(nd)):
                pad += [self.pads[i], self.pads[nd + i]]
            y = self.conv(F.pad(y, pad))
            for axis in range(nd):
                out = x.shape[2 + axis] * self.stride[axis] + self.extra[axis]
                y = y.narrow(2 + axis, self.crop_begin[axis], out)
            return y

    return ResizeConv


def SubPixelConvTranspose(layer):  # noqa: N802  (a factory that reads like the class)
    """The exact replacement module for ``layer`` (an ``nn.ConvTranspose1d/2d``)."""
    return _subpixel_class()(layer)


def ResizeConv(layer):  # noqa: N802
    """The retrain replacement module for ``layer``, initialized from its weights."""
    return _resize_conv_class()(layer)


MODES = {"subpixel": SubPixelConvTranspose, "resize_conv": ResizeConv}


@dataclass
class Swap:
    name: str            # dotted module path in the user's model
    original: Any        # the nn.ConvTranspose it replaced (kept for distillation)
    replacement: Any
    exact: bool


def swap_conv_transpose(model, mode: str = "subpixel") -> list[Swap]:
    """Replace every ``nn.ConvTranspose1d/2d`` in ``model`` (in place); returns what was swapped."""
    torch = _torch()
    if mode not in MODES:
        raise BadInput(f"unknown replacement mode '{mode}'; choose one of: {', '.join(MODES)}")
    swaps: list[Swap] = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)):
                new = MODES[mode](child).to(child.weight.device)
                setattr(module, child_name, new)
                full = f"{name}.{child_name}" if name else child_name
                swaps.append(Swap(full, child, new, exact=(mode == "subpixel")))
    return swaps


def load_hook(spec: str) -> Callable:
    """``"pkg.module:function"`` → the function; one clear BadInput line for every failure."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise BadInput(f"retrain hook '{spec}' must look like pkg.module:function")
    mod_name, fn_name = spec.split(":")
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # noqa: BLE001  (any import failure is the user's module's)
        raise BadInput(f"retrain hook: cannot import module '{mod_name}': {exc}") from None
    fn = module
    for part in fn_name.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise BadInput(f"retrain hook: module '{mod_name}' has no attribute '{fn_name}'")
    if not callable(fn):
        raise BadInput(f"retrain hook: '{spec}' is not callable")
    return fn


@dataclass
class DistillReport:
    layer: str
    error_before: float   # RMS error vs the original layer on held-out inputs, before fitting
    error_after: float
    steps: int
    max_abs_before: float = 0.0
    max_abs_after: float = 0.0

    @property
    def factor(self) -> float:
        return self.error_before / max(self.error_after, 1e-30)


def layer_inputs(model, layer, calibration) -> list:
    """Capture what ``layer`` sees when ``model`` runs on the calibration inputs."""
    torch = _torch()
    seen = []
    handle = layer.register_forward_hook(lambda mod, args, out: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            for batch in calibration:
                model(*batch) if isinstance(batch, (tuple, list)) else model(batch)
    finally:
        handle.remove()
    return seen


def distill_layer(original, replacement, inputs=None, *, steps: int = 60,
                  seed: int = 0, name: str = "") -> DistillReport:
    """Fit ``replacement`` to reproduce ``original`` (MSE on its outputs) — layer-wise distillation.

    ``inputs``: tensors the layer sees (from :func:`layer_inputs`), else seeded standard-normal
    inputs of a generic size.  ``steps``: L-BFGS iterations.  The error is measured on held-out inputs, before and after.
    """
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    nd = len(original.kernel_size)
    if inputs:
        data = torch.cat([t.float() for t in inputs])
    else:
        data = torch.randn((24, original.in_channels) + (8,) * nd, generator=gen)
    split = max(1, len(data) // 4)
    held, train = data[:split], data[split:] if len(data) > 1 else data
    original = original.eval()
    with torch.no_grad():
        target_train, target_held = original(train), original(held)

        def held_error():
            diff = replacement(held) - target_held
            return float(diff.pow(2).mean().sqrt()), float(diff.abs().max())

        before = held_error()
    # The replacement is linear in its weights, so the fit is a least-squares problem:
    # L-BFGS reaches its optimum in a few dozen iterations where Adam needs hundreds.
    replacement.train()
    opt = torch.optim.LBFGS(replacement.parameters(), lr=1.0, max_iter=steps, history_size=20,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(replacement(train), target_train)
        loss.backward()
        return loss

    opt.step(closure)
    replacement.eval()
    with torch.no_grad():
        after = held_error()
    return DistillReport(name, before[0], after[0], steps, before[1], after[1])


def default_retrain_hook(model, swaps: list[Swap], calibration=None, *, steps: int = 60) -> list[DistillReport]:
    """Fit every non-exact replacement to the layer it replaced; exact ones need nothing."""
    reports = []
    for swap in swaps:
        if swap.exact:
            continue
        inputs = None
        if calibration is not None:
            # Run the model with the original layer back in place to see its real inputs.
            parent, attr_name = _parent(model, swap.name)
            setattr(parent, attr_name, swap.original)
            try:
                inputs = layer_inputs(model, swap.original, calibration)
            finally:
                setattr(parent, attr_name, swap.replacement)
        reports.append(distill_layer(swap.original, swap.replacement, inputs, steps=steps, name=swap.name))
    return reports


def _parent(model, dotted: str):
    parts = dotted.split(".")
    parent = model
    for p in parts[:-1]:
        parent = getattr(parent, p)
    return parent, parts[-1]


def apply_retrain_hook(model, hook: Callable | str | None = None, *, mode: str = "subpixel",
                       calibration=None, steps: int = 60):
    """Swap every ConvTranspose for its replacement, then fine-tune: the user's ``hook(model)``
    (its return value is the model used from then on), or the default layer-wise distillation.

    The default hook's reports are kept on ``model.edgeconv_retrain_report``.
    """
    torch = _torch()
    if isinstance(hook, str):
        hook = load_hook(hook)
    swaps = swap_conv_transpose(model, mode)
    if hook is None:
        reports = default_retrain_hook(model, swaps, calibration, steps=steps)
        object.__setattr__(model, "edgeconv_retrain_report", reports)
        return model.eval()
    result = hook(model)
    if result is None:
        result = model  # a hook that trains in place may return nothing
    if not isinstance(result, torch.nn.Module):
        raise BadInput(f"retrain hook returned {type(result).__name__}, not a torch.nn.Module")
    return result


def onnx_resize_conv_pair(w: np.ndarray, bias: np.ndarray | None, geo: TransposeGeometry,
                          conv_w: np.ndarray):
    """Torch modules for one ONNX ``retrain`` rewrite: (teacher, student).

    ``teacher`` is the original ConvTranspose (ONNX weights, its pads window); ``student`` is the
    Resize+Conv block the rule emitted, initialized from ``conv_w``; ``student.conv`` holds the
    weights that go back into the ONNX graph.
    """
    torch = _torch()
    nn = torch.nn
    nd = len(geo.stride)
    in_ch, out_ch = w.shape[0], w.shape[1] * geo.group
    full = [s * (n - 1) + d * (k - 1) + 1 for s, n, d, k in zip(geo.stride, geo.in_size, geo.dilation, geo.kernel)]
    # torch pads both ends equally; ONNX pads may not: model the layer with padding 0 and enough
    # output_padding, then keep the window [pad_begin, pad_begin + out) explicitly.
    adj = [max(0, o + b - f) for o, b, f in zip(geo.out_size, geo.pad_begin, full)]
    layer = (nn.ConvTranspose1d if nd == 1 else nn.ConvTranspose2d)(
        in_ch, out_ch, geo.kernel, geo.stride, 0, output_padding=adj, dilation=geo.dilation,
        groups=geo.group, bias=bias is not None)
    conv = (nn.Conv1d if nd == 1 else nn.Conv2d)(
        in_ch, out_ch, geo.kernel, dilation=geo.dilation, groups=geo.group, bias=bias is not None)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w.astype(np.float32)))
        conv.weight.copy_(torch.from_numpy(conv_w.astype(np.float32)))
        if bias is not None:
            layer.bias.copy_(torch.from_numpy(bias.astype(np.float32)))
            conv.bias.copy_(torch.from_numpy(bias.astype(np.float32)))
    rc = resize_conv_geometry(geo)

    class Teacher(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer
            self.kernel_size, self.in_channels = tuple(geo.kernel), in_ch

        def forward(self, x):
            y = self.layer(x)
            for axis in range(nd):
                y = y.narrow(2 + axis, geo.pad_begin[axis], geo.out_size[axis])
            return y

    class Student(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x):
            y = nn.functional.interpolate(x, scale_factor=geo.stride, mode="nearest")
            pad = []
            for i in reversed(range(nd)):
                pad += [rc.pads[i], rc.pads[nd + i]]
            y = self.conv(nn.functional.pad(y, pad))
            for axis in range(nd):
                y = y.narrow(2 + axis, rc.crop_begin[axis], geo.out_size[axis])
            return y

    return Teacher().eval(), Student()


def fit_onnx_resize_conv(w: np.ndarray, bias: np.ndarray | None, geo: TransposeGeometry,
                         conv_w: np.ndarray, *, seed: int = 0):
    """The default hook for an ONNX graph: fit the Resize+Conv weights the ``retrain`` rule
    emitted to the original ConvTranspose on seeded standard-normal inputs; returns
    (weight, bias, report).

    The replacement is linear in its weights, so the fit that layer-wise distillation approaches
    by iterations is one least-squares problem per group: the columns are the upsampled, padded
    input windows the Conv reads (:func:`_resize_conv_columns`), the targets the ConvTranspose's
    outputs (:func:`_conv_transpose_outputs`).  numpy solves it exactly, without torch (an ONNX
    port imports no torch), in milliseconds where L-BFGS took seconds.  The errors before and
    after are measured on held-out inputs."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((24, w.shape[0]) + tuple(geo.in_size)).astype(np.float32)
    held, train = data[:6], data[6:]
    has_bias = bias is not None
    group = geo.group
    out_ch = conv_w.shape[0]
    per_group = out_ch // group
    columns = _resize_conv_columns(train, geo)  # [G, rows, C/G * prod(K)]
    target = _conv_transpose_outputs(train, w, bias, geo)  # [N, O, *out]
    target = np.moveaxis(target, 1, -1).reshape(-1, out_ch).astype(np.float64)
    fitted = np.empty_like(conv_w, dtype=np.float64)
    fitted_b = np.empty(out_ch, np.float64) if has_bias else None
    for g in range(group):
        a = columns[g].astype(np.float64)
        if has_bias:
            a = np.concatenate([a, np.ones((len(a), 1))], axis=1)
        solution = np.linalg.lstsq(a, target[:, g * per_group:(g + 1) * per_group], rcond=None)[0]
        weights = solution[:-1] if has_bias else solution
        fitted[g * per_group:(g + 1) * per_group] = weights.T.reshape((per_group,) + conv_w.shape[1:])
        if has_bias:
            fitted_b[g * per_group:(g + 1) * per_group] = solution[-1]
    fitted = fitted.astype(w.dtype)
    fitted_b = fitted_b.astype(bias.dtype) if has_bias else None
    want = _conv_transpose_outputs(held, w, bias, geo)

    def held_error(weights, b):
        diff = _resize_conv_outputs(held, weights, b, geo) - want
        return float(np.sqrt(np.mean(diff.astype(np.float64) ** 2))), float(np.abs(diff).max())

    before = held_error(conv_w, bias)
    after = held_error(fitted, fitted_b)
    return fitted, fitted_b, DistillReport("", before[0], after[0], 0, before[1], after[1])


def _conv_transpose_outputs(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                            geo: TransposeGeometry) -> np.ndarray:
    """The ConvTranspose ``geo`` describes, in float64 (ONNX ConvTranspose): the full scatter
    output, the bias everywhere, then the window [pad_begin, pad_begin + out_size) per axis
    (positions past the full output, an ``output_padding``, hold the bias alone)."""
    nd = len(geo.stride)
    y = conv_transpose_full(x, w, geo.stride, geo.dilation, geo.group, dtype=np.float64)
    y = np.pad(y, [(0, 0), (0, 0)] + [(0, max(0, b + o - f)) for b, o, f in zip(geo.pad_begin, geo.out_size, y.shape[2:])])
    if bias is not None:
        y += bias.astype(np.float64).reshape((1, -1) + (1,) * nd)
    return y[(slice(None), slice(None)) + tuple(slice(b, b + o) for b, o in zip(geo.pad_begin, geo.out_size))]


def _resize_conv_columns(x: np.ndarray, geo: TransposeGeometry) -> np.ndarray:
    """What the ``retrain`` rule's Conv multiplies its weights by: nearest upsampling by the
    stride, the Conv's pads, its dilated windows at stride 1 over the kept window of its output
    (``resize_conv_geometry``).  ``[groups, N * prod(out_size), C/groups * prod(kernel)]``."""
    nd = len(geo.stride)
    rc = resize_conv_geometry(geo)
    up = x
    for axis, s in enumerate(geo.stride):
        up = np.repeat(up, s, axis=2 + axis)
    up = np.pad(up, [(0, 0), (0, 0)] + [(rc.pads[i], rc.pads[nd + i]) for i in range(nd)])
    # output positions [crop, crop + out) read the input from crop on, one window extent further
    up = up[(slice(None), slice(None)) + tuple(slice(c, c + o + (k - 1) * d) for c, o, k, d in zip(
        rc.crop_begin, geo.out_size, geo.kernel, geo.dilation))]
    cols, _ = conv_columns(up, geo.kernel, [1] * nd, geo.dilation, geo.group)  # [N, G, C/G * K, P]
    return cols.transpose(1, 0, 3, 2).reshape(geo.group, -1, cols.shape[2])


def _resize_conv_outputs(x: np.ndarray, conv_w: np.ndarray, bias: np.ndarray | None,
                         geo: TransposeGeometry) -> np.ndarray:
    """The ``retrain`` rule's Resize + Conv + Slice with weights ``conv_w``, ``[N, O, *out]``."""
    columns = _resize_conv_columns(x, geo)
    per_group = conv_w.shape[0] // geo.group
    flat = conv_w.reshape(geo.group, per_group, -1).astype(np.float64)
    y = np.concatenate([columns[g].astype(np.float64) @ flat[g].T for g in range(geo.group)], axis=1)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return np.moveaxis(y.reshape((x.shape[0],) + tuple(geo.out_size) + (-1,)), -1, 1)


def _conv_weights(student, w, bias):
    return (student.conv.weight.detach().numpy().astype(w.dtype),
            None if bias is None else student.conv.bias.detach().numpy().astype(bias.dtype))


def run_user_hook_on_blocks(hook: Callable | str, pairs: dict[str, tuple]) -> dict[str, tuple]:
    """ONNX path of ``--retrain-hook``: the user's function gets the patched model — an
    ``nn.ModuleDict`` of the replacement blocks by node name (``.teachers`` holds the original
    layers) — and what it returns supplies the weights.  Returns {node: (weight, bias)}."""
    torch = _torch()
    if isinstance(hook, str):
        hook = load_hook(hook)
    keys = {name: f"block{i}" for i, name in enumerate(pairs)}
    blocks = torch.nn.ModuleDict({keys[n]: student for n, (_, student, _, _) in pairs.items()})
    object.__setattr__(blocks, "teachers", {keys[n]: teacher for n, (teacher, _, _, _) in pairs.items()})
    object.__setattr__(blocks, "node_names", dict(keys))
    result = hook(blocks)
    result = blocks if result is None else result
    if not isinstance(result, torch.nn.ModuleDict) or set(result.keys()) != set(blocks.keys()):
        raise BadInput("retrain hook must return the ModuleDict of replacement blocks it was given")
    return {n: _conv_weights(result[keys[n]], w, b) for n, (_, _, w, b) in pairs.items()}
