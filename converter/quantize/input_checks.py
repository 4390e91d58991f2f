"""Do these input tensors look preprocessed the way the spec says?  Two cheap checks.

Both undo the spec's value transform (``preprocess.undo_spec``: ``x * std + mean``, then the
range back to 0..255) and look at the pixels that come out.

* **Range.**  Correctly preprocessed data comes back inside 0..255.  More than 0.1% of values
  outside [-1, 256] means the data was normalized differently (other mean/std, other range);
  data spanning less than 5% of 0..255 was most likely scaled twice (0..1 data under a 0-255
  spec).  Reliable: it needs no assumption about the images.

* **Swapped channel order** (only when the spec says ``rgb``).  Natural photographs are, on
  average, redder than they are blue (ImageNet's channel means are R 124, G 116, B 104 on
  0..255): when channel 0 comes back darker than channel 2 by more than 8 levels on average and
  in at least 60% of the samples, the data was most likely decoded as BGR (OpenCV's order).
  Limits, honestly: this is a statistic of photographs, not a law.  Sets dominated by sky, water,
  snow, night scenes or blue products, synthetic renders, medical and satellite imagery can be
  legitimately bluer than red and are flagged wrongly; grayscale-like data gives no signal (no
  finding); fewer than 4 samples are not judged.  It is reported as a warning, never an error.
"""

from __future__ import annotations

import numpy as np

from .preprocess import PreprocessSpec, undo_spec

OUTSIDE_FRACTION = 1e-3
NARROW_SPAN = 0.05 * 255.0
SWAP_LEVELS = 8.0
SWAP_VOTES = 0.6
MIN_SWAP_SAMPLES = 4


def check_inputs(samples: list[dict[str, np.ndarray]], spec: PreprocessSpec, source: str = "inputs") -> list[str]:
    """One line per finding where ``samples`` (feed dicts) contradict the bound ``spec``."""
    if not samples or spec.input is None or spec.input not in samples[0]:
        return []
    x = np.stack([np.asarray(s[spec.input]).reshape(spec.input_shape)[0] for s in samples])
    pixels = undo_spec(spec, x)  # N, H, W, C on 0..255, model channel order
    findings = []
    lo, hi = spec.value_range
    outside = float(np.mean((pixels < -1.0) | (pixels > 256.0)))
    if outside > OUTSIDE_FRACTION:
        observed = pixels * (hi - lo) / 255.0 + lo
        findings.append(
            f"{source}: {outside:.1%} of '{spec.input}' values fall outside the spec's range {lo:g}..{hi:g} once "
            f"mean/std are undone (they span {observed.min():.3g}..{observed.max():.3g}): the data was normalized "
            "differently from --preprocess")
    elif float(pixels.max() - pixels.min()) < NARROW_SPAN:
        findings.append(
            f"{source}: '{spec.input}' values use only {float(pixels.max() - pixels.min()) / 255.0:.1%} of the spec's "
            f"range {lo:g}..{hi:g} once mean/std are undone: scaled twice (e.g. 0..1 data under range=0-255)?")
    if spec.order == "rgb" and spec.channels == 3 and len(samples) >= MIN_SWAP_SAMPLES:
        red_minus_blue = pixels[..., 0].mean(axis=(1, 2)) - pixels[..., 2].mean(axis=(1, 2))
        mean_gap = float(red_minus_blue.mean())
        votes = float(np.mean(red_minus_blue < 0))
        if mean_gap < -SWAP_LEVELS and votes >= SWAP_VOTES:
            findings.append(
                f"{source}: the channel order looks swapped: the spec says rgb, but channel 0 is darker than "
                f"channel 2 by {-mean_gap:.0f} of 255 levels on average, in {votes:.0%} of {len(samples)} samples, "
                "as in BGR data (photos are redder than blue on average); check the decoder (OpenCV decodes BGR)")
    return findings
