"""saber-profile: the offline phase against a live backend.

Hold L requests in flight at each of several load levels (closed loop), time
every request, fit the speed models and a TTFT model, and write the profile the
gateway loads, a PNG and an SLA feasibility report. ``cli.main`` is the console
script; the parts are importable for tests and scripts. See docs/profile.md.
"""

from saber.profile.errors import ProfileRunError
from saber.profile.feasibility import Feasibility, feasibility
from saber.profile.fit import SpeedFits, choose_held_out, fit_speed, fit_ttft
from saber.profile.points import Point, PointsFile, Recorded, points_path, read_points
from saber.profile.requests import RequestSpec, Supply, WorkloadSupply, read_dataset
from saber.profile.runner import InFlight, LevelResult, Runner

__all__ = [
    "Feasibility",
    "InFlight",
    "LevelResult",
    "Point",
    "PointsFile",
    "ProfileRunError",
    "Recorded",
    "RequestSpec",
    "Runner",
    "SpeedFits",
    "Supply",
    "WorkloadSupply",
    "choose_held_out",
    "feasibility",
    "fit_speed",
    "fit_ttft",
    "points_path",
    "read_dataset",
    "read_points",
]
