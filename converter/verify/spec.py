"""What a port's verification compares on, and how strictly: one typed value.

``--inputs``, ``--atol``, ``--rtol``, ``--tolerances``, ``--seed`` and ``--input-range``
(``port``, a manifest entry, the Python API) become a :class:`VerifySpec`; ``None`` in its place
means ``--no-verify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class VerifySpec:
    #: An ``.npz`` of verification inputs (one array per input; a leading axis holds N samples);
    #: None: seeded random inputs.
    inputs: str | None = None
    atol: float | None = None
    rtol: float | None = None
    #: A tolerance profile (YAML: atol, rtol, layer_rmse, outputs: {name: {atol, rtol}}).
    tolerances: str | None = None
    #: Seed of the random verification inputs.
    seed: int = 0
    #: What random inputs draw, by input name (``--input-range ids=0:30522``: integers in
    #: [0, 30522); ``""``: every float input); see :func:`converter.runtimes.feeds.random_inputs`.
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def user_tolerances(self) -> bool:
        """Did the user set any tolerance (then an exporter's suggested one does not apply)?"""
        return self.tolerances is not None or self.atol is not None or self.rtol is not None

    def tolerance_profile(self):
        """The :class:`~converter.verify.stages.Tolerances` these flags make."""
        from .stages import load_tolerances

        return load_tolerances(self.tolerances, self.atol, self.rtol)

    def samples(self, model) -> list:
        """The input samples verification runs on ``model``: the ``inputs`` file, else seeded
        random inputs (the reference runs started early use the same ones)."""
        from .pipeline import choose_inputs

        return choose_inputs(model, self.inputs, seed=self.seed, ranges=self.ranges)[0]
