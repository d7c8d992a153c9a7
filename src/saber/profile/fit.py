"""Fitting the measured points: the speed models (``saber.speed.select_model``) and TTFT.

The speed models are fitted and ranked by ``saber.speed.select_model``, the one
selection procedure (``saber-bench profile`` uses it too): each is scored on the
load levels left out of its fit, and the kept model is the first, USL first, whose
error at the levels is within ``saber.speed.TIE`` of the best.
"""

from __future__ import annotations

from collections.abc import Sequence

from saber.profile.points import Point
from saber.speed import FitError, Selection, TTFTFit, select_model
from saber.speed import fit_ttft as speed_fit_ttft

__all__ = ["fit_speed", "fit_ttft"]


def fit_speed(points: Sequence[Point], held_out: Sequence[int] | None = None) -> Selection:
    """Fit and rank every speed model on the points, each labelled with its load level;
    FitError if none can be fitted. ``held_out`` None: leave each interior level out in
    turn; given: leave those levels out together and score them."""
    if not points:
        raise FitError("no points to fit")
    return select_model(
        [p.load for p in points],
        [p.speed for p in points],
        levels=[p.level for p in points],
        held_out=held_out,
    )


def fit_ttft(points: Sequence[Point]) -> TTFTFit | None:
    """The TTFT fit of the points that have a TTFT (``saber.speed.fit_ttft``)."""
    usable = [(p, p.ttft_s) for p in points if p.ttft_s is not None]
    if len({p.level for p, _ in usable}) < 2:
        return None
    return speed_fit_ttft(
        [p.prompt_tokens for p, _ in usable],
        [p.load for p, _ in usable],
        [t for _, t in usable],
        [p.output_tokens for p, _ in usable],
    )
