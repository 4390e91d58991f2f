"""Which samples each quantization number comes from: calibration, and the held-out samples.

Ranges (and bias correction's mean input maps) are fitted to the calibration samples; a number
measured on those same samples flatters the model (the HED edge detector: 34.9 dB in-sample,
31.5 dB on held-out photos).  So every choice edgeconv makes (bias correction kept or dropped,
the residual Adds' range layout, each ``auto`` decision, the per-layer table's measured gains)
and the verdict are computed on samples the ranges never saw:

* with ``--inputs``: those samples; the ranges come from every calibration sample;
* else, when the calibration set has at least :data:`MIN_TO_SPLIT` samples: a seeded random
  :data:`HELD_OUT_FRACTION` of it (at least :data:`MIN_HELD_OUT`, at most :data:`MAX_HELD_OUT`)
  is held out (``--seed``; the same set gives the same split on every run), the rest calibrates;
* else (too few to split): the calibration samples themselves, and the report says the numbers
  are in-sample.

:class:`QuantSamples` carries both parts and the words the report uses for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Sample = dict[str, np.ndarray]

HELD_OUT_FRACTION = 0.25
MIN_HELD_OUT = 4
MAX_HELD_OUT = 32
#: Fewer calibration samples than this are not split (each part would be too small to use).
MIN_TO_SPLIT = 12

#: ``QuantSamples.held_kind`` values.
INPUTS, HELD_OUT, IN_SAMPLE, RANDOM = "inputs", "held-out", "in-sample", "random"


@dataclass
class QuantSamples:
    """The calibration part and the held-out part of a port's samples."""

    calibrate: list[Sample]
    held: list[Sample]
    #: INPUTS (``--inputs``), HELD_OUT (split off the calibration set), IN_SAMPLE (the calibration
    #: samples themselves: too few to split) or RANDOM (seeded random inputs: no data given).
    held_kind: str
    #: Words for the held-out samples: "25 held-out calibration samples (seed 0)".
    held_label: str
    #: Indices (into the calibration set) of the samples held out, when split.
    held_indices: list[int] = field(default_factory=list)
    seed: int = 0

    @property
    def short_label(self) -> str:
        """The held-out samples in a few words, for lines that follow :attr:`held_label`'s."""
        n = len(self.held)
        return {INPUTS: f"the {n} --inputs samples", HELD_OUT: f"the {n} held-out samples",
                IN_SAMPLE: f"the {n} calibration samples (in-sample)"}.get(self.held_kind, f"the {n} random inputs")

    @property
    def in_sample(self) -> bool:
        return self.held_kind == IN_SAMPLE

    def to_dict(self) -> dict:
        """The report's ``samples`` record: where each number comes from."""
        return {"calibration": len(self.calibrate), "held_out": len(self.held), "held_out_kind": self.held_kind,
                "held_out_from": self.held_label, "held_out_indices": self.held_indices,
                "seed": self.seed}


def held_out_count(total: int) -> int:
    """How many of ``total`` calibration samples are held out (0: too few to split)."""
    if total < MIN_TO_SPLIT:
        return 0
    return int(min(MAX_HELD_OUT, max(MIN_HELD_OUT, round(total * HELD_OUT_FRACTION))))


def split_samples(calibration: list[Sample] | None, inputs: list[Sample] | None, seed: int,
                  inputs_label: str = "--inputs", fallback: list[Sample] | None = None,
                  fitted: bool = True) -> QuantSamples:
    """The calibration samples and the held-out ones (module docstring).  ``fallback``: the samples
    to judge on when neither calibration data nor ``--inputs`` is given (seeded random inputs);
    ``fitted=False``: nothing is fitted to the calibration samples (float16, int8 weights), so
    all of them are held out."""
    calibration = list(calibration or [])
    if inputs:
        return QuantSamples(calibration, list(inputs), INPUTS, f"{_count(len(inputs))} of {inputs_label}", seed=seed)
    if calibration and not fitted:
        return QuantSamples([], calibration, HELD_OUT, f"the {_count(len(calibration))} of the calibration set "
                            "(nothing is fitted to them in this mode)", list(range(len(calibration))), seed)
    if not calibration:
        samples = list(fallback or [])
        return QuantSamples([], samples, RANDOM, f"{_count(len(samples))} of seeded random inputs (seed {seed})",
                            seed=seed)
    count = held_out_count(len(calibration))
    if count == 0:
        return QuantSamples(calibration, calibration, IN_SAMPLE,
                            f"the {_count(len(calibration))} calibration samples themselves (too few to hold "
                            f"some out: fewer than {MIN_TO_SPLIT})", seed=seed)
    held = sorted(int(i) for i in np.random.default_rng(seed).choice(len(calibration), count, replace=False))
    chosen = set(held)
    return QuantSamples([s for i, s in enumerate(calibration) if i not in chosen], [calibration[i] for i in held],
                        HELD_OUT, f"{_count(count)} held out of the calibration set (seed {seed})", held, seed)


def _count(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''}"
