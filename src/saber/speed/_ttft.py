"""Fitting time to first token against prompt length and load (``TTFTFit``)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from saber.speed._profile import TTFTFit

MIN_POINTS = 8


def fit_ttft(
    prompt_tokens: ArrayLike,
    loads: ArrayLike,
    ttfts: ArrayLike,
    output_tokens: ArrayLike | None = None,
) -> TTFTFit | None:
    """Linear least squares on relative errors, non-negative coefficients; None with
    too few points.

    The features are 1, P, L-1 and P*(L-1) (see ``TTFTFit``): a prompt costs
    prefill work per token, and each step it shares with the other running
    requests takes longer. Each point's error counts as a share of its own TTFT: in
    absolute terms the few slow first tokens of a saturated engine (seconds) outweigh
    the many of the loads a gateway runs at (tens of milliseconds), and the fit that
    pleased them predicted 3 to 12 times the TTFT at loads 12 to 96 on the engine
    model's presets (mean error 230% to 610%; relative: 17% to 27%), which held back
    every request with a TTFT limit it could meet.

    With the requests' ``output_tokens``, also the prefill of an idle engine
    (``prefill_s_per_token``, from the points at the lowest load alone: the pooled fit
    puts much of a prompt's cost in its product with the load) and the prompt tokens
    per generated token of the profile's requests.
    """
    prompt = np.asarray(prompt_tokens, dtype=float)
    extra = np.asarray(loads, dtype=float) - 1.0
    ttft = np.asarray(ttfts, dtype=float)
    if prompt.size < MIN_POINTS or np.unique(extra).size < 2:
        return None
    design = np.column_stack((np.ones_like(prompt), prompt, extra, prompt * extra))
    scale = np.maximum(np.abs(design).max(axis=0), 1e-12)
    from scipy.optimize import nnls  # only to fit: evaluating a fit needs no scipy

    weight = 1.0 / np.maximum(ttft, 1e-3)  # a first token under 1 ms: as 1 ms
    coef, _ = nnls(design / scale * weight[:, None], ttft * weight)
    coef = coef / scale
    predicted = design @ coef
    total = float(np.sum((ttft - ttft.mean()) ** 2))
    residual = float(np.sum((ttft - predicted) ** 2))
    r2 = 1.0 - residual / total if total > 0 else (1.0 if residual == 0 else 0.0)
    positive = ttft > 0
    err = float(np.mean(np.abs(predicted[positive] - ttft[positive]) / ttft[positive]))
    prefill = _prefill(prompt, extra, ttft, output_tokens)
    return TTFTFit(
        prefill_s_per_token=None if prefill is None else prefill[0],
        prompt_per_output=None if prefill is None else prefill[1],
        intercept_s=float(coef[0]),
        per_prompt_token_s=float(coef[1]),
        per_load_s=float(coef[2]),
        per_prompt_token_load_s=float(coef[3]),
        r2=min(r2, 1.0),
        mape=err if positive.any() else 0.0,
        n=int(prompt.size),
        prompt_tokens_max=int(prompt.max()),
        load_max=float(extra.max() + 1.0),
    )


def _prefill(
    prompt: np.ndarray, extra: np.ndarray, ttft: np.ndarray, output_tokens: ArrayLike | None
) -> tuple[float, float] | None:
    """(seconds per prompt token at the lowest load, prompt tokens per output token)."""
    if output_tokens is None:
        return None
    outputs = np.asarray(output_tokens, dtype=float)
    low = extra == extra.min()
    if low.sum() < MIN_POINTS or np.unique(prompt[low]).size < 2 or outputs.sum() <= 0:
        return None
    slope = float(np.polyfit(prompt[low], ttft[low], 1)[0])
    return max(slope, 0.0), float(prompt.sum() / outputs.sum())
