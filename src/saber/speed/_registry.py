"""The speed models by kind, and fitting one by name."""

from __future__ import annotations

from numpy.typing import ArrayLike

from saber.speed._base import SpeedModel
from saber.speed.curves.linear import LinearModel
from saber.speed.curves.logdecay import LogDecayModel
from saber.speed.curves.logistic import LogisticModel
from saber.speed.curves.solo import SoloUSLModel
from saber.speed.curves.usl import USLModel

MODELS: dict[str, type[SpeedModel]] = {
    model.kind: model
    for model in (USLModel, SoloUSLModel, LinearModel, LogisticModel, LogDecayModel)
}
"""Every speed model by its `kind`; USL, the paper's choice, comes first."""


def model_class(kind: str) -> type[SpeedModel]:
    """The class for `kind`; a ValueError lists the known kinds."""
    try:
        return MODELS[kind]
    except KeyError:
        known = ", ".join(MODELS)
        raise ValueError(f"unknown speed model kind {kind!r} (expected one of {known})") from None


def fit_model(kind: str, loads: ArrayLike, speeds: ArrayLike) -> SpeedModel:
    """Fit the model named `kind`; raises FitError if the data cannot support it."""
    return model_class(kind).fit(loads, speeds)
