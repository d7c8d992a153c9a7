"""Speed models f(L): per-request decode speed (tokens/s) at L concurrent requests.

Fit them all to profiled (load, speed) points and choose one with `select_model`, the
one selection procedure (saber-profile and saber-bench profile both use it); a profile
file keeps the chosen fit. USL is the paper's model and the default. Evaluating
f(L) needs numpy only; fitting imports scipy when it runs.
"""

from saber.speed._base import SPEED_FLOOR, SpeedModel
from saber.speed._errors import FitError, ParamError, ProfileError
from saber.speed._metrics import mape, mean_abs_pct_error, r2_score, r_squared
from saber.speed._online import LiveFit, Refit
from saber.speed._profile import (
    FitScore,
    LatencyTable,
    LevelSummary,
    ModelInfo,
    PointsSummary,
    Profile,
    ProfiledBackend,
    ProfilingInfo,
    TaskLatency,
    TTFTFit,
    build_profile,
    load_profile,
    save_profile,
    summarize_points,
)
from saber.speed._registry import MODELS, fit_model
from saber.speed._select import TIE, FitReport, Selection, interior_levels, select_model
from saber.speed._ttft import fit_ttft
from saber.speed.curves.linear import LinearModel
from saber.speed.curves.logdecay import LogDecayModel
from saber.speed.curves.logistic import LogisticModel
from saber.speed.curves.solo import SoloUSLModel
from saber.speed.curves.usl import USLModel

__all__ = [
    "MODELS",
    "SPEED_FLOOR",
    "TIE",
    "FitError",
    "FitReport",
    "FitScore",
    "LatencyTable",
    "LevelSummary",
    "LinearModel",
    "LiveFit",
    "LogDecayModel",
    "LogisticModel",
    "ModelInfo",
    "ParamError",
    "PointsSummary",
    "Profile",
    "ProfileError",
    "ProfiledBackend",
    "ProfilingInfo",
    "Refit",
    "Selection",
    "SoloUSLModel",
    "SpeedModel",
    "TTFTFit",
    "TaskLatency",
    "USLModel",
    "build_profile",
    "fit_model",
    "fit_ttft",
    "interior_levels",
    "load_profile",
    "mape",
    "mean_abs_pct_error",
    "r2_score",
    "r_squared",
    "save_profile",
    "select_model",
    "summarize_points",
]
