"""The retraining hook: torch replacement modules, the swap, user hooks, the default fit."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch

from converter.demo import zoo
from converter.errors import BadInput
from converter.ir.graph import op_histogram
from converter.legalize.rewrites import retrain


def _err(a, b):
    return float((a - b).abs().max())


@pytest.mark.parametrize("layer", [
    torch.nn.ConvTranspose2d(16, 1, 9, 3, 4, output_padding=2),      # superres
    torch.nn.ConvTranspose2d(8, 4, 2, 2),                            # unet
    torch.nn.ConvTranspose2d(6, 4, (3, 4), (2, 3), (1, 0), output_padding=(1, 2), groups=2, dilation=(2, 1)),
    torch.nn.ConvTranspose1d(6, 4, 5, 3, 2, output_padding=1, groups=2, dilation=2),
    torch.nn.ConvTranspose1d(3, 2, 4, 2, 1, bias=False),
], ids=["superres", "unet", "2d-mixed", "1d-groups-dilation", "1d-no-bias"])
def test_subpixel_module_equals_conv_transpose(layer):
    torch.manual_seed(0)
    replacement = retrain.SubPixelConvTranspose(layer)
    nd = len(layer.kernel_size)
    with torch.no_grad():
        for size in (5, 9, 12):  # the module works for any input size, not just the probe's
            x = torch.randn((2, layer.in_channels) + (size,) * nd)
            assert _err(replacement(x), layer(x)) <= 1e-5


@pytest.mark.parametrize("name, count", [("superres", 1), ("unet", 2)])
def test_swap_keeps_the_model_function_and_reexports_without_conv_transpose(name, count, tmp_path):
    model = zoo.build(name)
    x = torch.from_numpy(zoo.example_inputs(name)["input"])
    with torch.no_grad():
        ref = model(x)
    swaps = retrain.swap_conv_transpose(model, "subpixel")
    assert len(swaps) == count and all(s.exact for s in swaps)
    assert not any(isinstance(m, torch.nn.ConvTranspose2d) for m in model.modules())
    with torch.no_grad():
        assert _err(model(x), ref) <= 1e-5
    path = tmp_path / f"{name}.onnx"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17)
    assert "ConvTranspose" not in op_histogram(onnx.load(str(path)))


def test_default_hook_reduces_error_of_retrain_case():
    """ResizeConv cannot represent a 9×9 stride-3 transposed conv; fitting shrinks the gap."""
    torch.manual_seed(0)
    model = zoo.build("superres")
    x = torch.from_numpy(zoo.example_inputs("superres", seed=5)["input"])
    with torch.no_grad():
        ref = model(x)
    patched = retrain.apply_retrain_hook(model, None, mode="resize_conv", steps=40)
    (report,) = patched.edgeconv_retrain_report
    assert report.layer == "deconv"
    assert report.factor >= 1.4, report        # measured: ≈1.6 (RMS, held-out inputs)
    assert report.max_abs_after < report.max_abs_before
    with torch.no_grad():
        assert 0 < _err(patched(x), ref) < 1.0   # not exact, but close after fitting


def test_default_hook_uses_calibration_inputs():
    torch.manual_seed(0)
    model = zoo.build("unet")
    calib = [torch.randn(1, 3, 32, 32) for _ in range(2)]
    patched = retrain.apply_retrain_hook(model, None, mode="resize_conv", calibration=calib, steps=20)
    reports = patched.edgeconv_retrain_report
    assert [r.layer for r in reports] == ["up2", "up1"]
    assert all(r.error_after < r.error_before for r in reports)


def test_user_hook_from_spec(tmp_path, monkeypatch):
    (tmp_path / "myhooks.py").write_text(textwrap.dedent("""
        import torch
        seen = []
        def finetune(model):
            seen.append(sum(isinstance(m, torch.nn.ConvTranspose2d) for m in model.modules()))
            for p in model.parameters():
                p.requires_grad_(False)
            return model
        def bad(model):
            return 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = retrain.load_hook("myhooks:finetune")
    out = retrain.apply_retrain_hook(zoo.build("unet"), hook)
    assert sys.modules["myhooks"].seen == [0]   # the hook got the patched model
    assert not any(p.requires_grad for p in out.parameters())
    with pytest.raises(BadInput, match="not a torch.nn.Module"):
        retrain.apply_retrain_hook(zoo.build("unet"), "myhooks:bad")


@pytest.mark.parametrize("spec, message", [
    ("no_colon", "must look like pkg.module:function"),
    ("a:b:c", "must look like"),
    ("surely_not_a_module_xyz:f", "cannot import module 'surely_not_a_module_xyz'"),
    ("converter.demo.zoo:no_such_function", "has no attribute 'no_such_function'"),
    ("converter.demo.zoo:NAMES", "is not callable"),
])
def test_load_hook_errors_are_one_line(spec, message):
    with pytest.raises(BadInput, match=message) as err:
        retrain.load_hook(spec)
    assert "\n" not in str(err.value)


def test_unknown_mode():
    with pytest.raises(BadInput, match="unknown replacement mode"):
        retrain.swap_conv_transpose(zoo.build("unet"), "magic")


def test_onnx_fit_of_resize_conv_weights():
    """The ONNX-side default hook fits the retrain rule's Conv weights to the original layer."""
    from converter.legalize.rewrites.convtranspose import TransposeGeometry, resize_conv_init

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 4, 4, 4)) / 8).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    geo = TransposeGeometry((6, 6), (4, 4), (2, 2), (1, 1), (1, 1), (12, 12), 1)
    fitted, fitted_b, report = retrain.fit_onnx_resize_conv(w, b, geo, resize_conv_init(w, 1, (2, 2)))
    assert fitted.shape == (4, 8, 4, 4) and fitted_b.shape == (4,)
    assert report.error_after < report.error_before / 1.2
