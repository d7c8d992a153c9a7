"""saber-profile: the offline phase against a live backend.

Hold L requests in flight at each of several load levels (closed loop), time
every request, fit the speed models and a TTFT model, and write the profile the
gateway loads. ``profile_backend`` does all of it and returns the profile;
``cli.main``, the console script, is argument parsing around it and the report (the
tables, a PNG and an SLA feasibility report) after it. See docs/profile.md.
"""

from saber.profile.errors import ProfileInterrupted, ProfileRunError
from saber.profile.feasibility import Feasibility, feasibility
from saber.profile.fit import fit_speed, fit_ttft
from saber.profile.points import Point, PointsFile, Recorded, points_path, read_points
from saber.profile.requests import RequestSpec, Supply, WorkloadSupply, read_dataset
from saber.profile.run import DEFAULT_LEVELS, fit_profile, profile_backend
from saber.profile.runner import InFlight, LevelResult, Runner

__all__ = [
    "DEFAULT_LEVELS",
    "Feasibility",
    "InFlight",
    "LevelResult",
    "Point",
    "PointsFile",
    "ProfileInterrupted",
    "ProfileRunError",
    "Recorded",
    "RequestSpec",
    "Runner",
    "Supply",
    "WorkloadSupply",
    "feasibility",
    "fit_profile",
    "fit_speed",
    "fit_ttft",
    "points_path",
    "profile_backend",
    "read_dataset",
    "read_points",
]
