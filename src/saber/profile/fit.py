"""Fitting the measured points: the speed models (``saber.speed.select_model``) and TTFT.

The speed models are fitted and ranked by ``saber.speed.select_model``, the one
selection procedure (``saber-bench profile`` uses it too): each is scored on the
load levels left out of its fit, and the kept model is the first, USL first, whose
error at the levels is within ``saber.speed.TIE`` of the best.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.optimize import nnls

from saber.profile.points import Point
from saber.speed import FitError, Selection, TTFTFit, mean_abs_pct_error, r_squared, select_model

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
    """Linear least squares with non-negative coefficients; None with too few points.

    The features are 1, P, L-1 and P*(L-1) (see ``TTFTFit``): a prompt costs
    prefill work per token, and each step it shares with the other running
    requests takes longer.
    """
    usable = [p for p in points if p.ttft_s is not None]
    if len(usable) < 8 or len({p.level for p in usable}) < 2:
        return None
    prompt = np.array([p.prompt_tokens for p in usable], dtype=float)
    extra = np.array([p.load for p in usable]) - 1.0
    ttft = np.array([p.ttft_s for p in usable], dtype=float)
    design = np.column_stack((np.ones_like(prompt), prompt, extra, prompt * extra))
    scale = np.maximum(np.abs(design).max(axis=0), 1e-12)
    coef, _ = nnls(design / scale, ttft)
    coef = coef / scale
    predicted = design @ coef
    positive = ttft > 0
    return TTFTFit(
        intercept_s=float(coef[0]),
        per_prompt_token_s=float(coef[1]),
        per_load_s=float(coef[2]),
        per_prompt_token_load_s=float(coef[3]),
        r2=r_squared(ttft, predicted),
        mape=mean_abs_pct_error(ttft[positive], predicted[positive]) if positive.any() else 0.0,
        n=len(usable),
        prompt_tokens_max=int(prompt.max()),
        load_max=float(extra.max() + 1.0),
    )
