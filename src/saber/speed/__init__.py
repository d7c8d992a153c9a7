"""Speed models f(L): per-request decode speed (tokens/s) at L concurrent requests.

Fit one to profiled (load, speed) points, rank them with `fit_all`, and keep the
chosen fit in a profile file. USL is the paper's model and the default.
"""

from saber.speed._base import SPEED_FLOOR, SpeedModel
from saber.speed._errors import FitError, ParamError, ProfileError
from saber.speed._linear import LinearModel
from saber.speed._logdecay import LogDecayModel
from saber.speed._logistic import LogisticModel
from saber.speed._metrics import mape, r2_score
from saber.speed._profile import (
    FitScore,
    LevelSummary,
    ModelInfo,
    PointsSummary,
    Profile,
    ProfiledBackend,
    ProfilingInfo,
    TTFTFit,
    build_profile,
    load_profile,
    save_profile,
    summarize_points,
)
from saber.speed._registry import MODELS, fit_model
from saber.speed._select import USL_TIE, FitReport, fit_all, rank
from saber.speed._solo import SoloUSLModel
from saber.speed._usl import USLModel

__all__ = [
    "MODELS",
    "SPEED_FLOOR",
    "USL_TIE",
    "FitError",
    "FitReport",
    "FitScore",
    "LevelSummary",
    "LinearModel",
    "LogDecayModel",
    "LogisticModel",
    "ModelInfo",
    "ParamError",
    "PointsSummary",
    "Profile",
    "ProfileError",
    "ProfiledBackend",
    "ProfilingInfo",
    "SoloUSLModel",
    "SpeedModel",
    "TTFTFit",
    "USLModel",
    "build_profile",
    "fit_all",
    "fit_model",
    "load_profile",
    "mape",
    "r2_score",
    "rank",
    "save_profile",
    "summarize_points",
]
