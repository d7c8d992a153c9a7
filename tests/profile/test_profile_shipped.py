"""Every profile shipped in profiles/ loads, and describes a usable speed curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from saber.config import DEFAULT_PROFILE_DIR
from saber.speed import load_profile

SHIPPED = sorted(DEFAULT_PROFILE_DIR.glob("*.json"))


def test_there_is_a_shipped_profile() -> None:
    assert any(path.name == "saber-sim-paper.json" for path in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    model = profile.speed_model()
    loads = np.linspace(1.0, profile.points.load_max, 50)
    speeds = model.predict(loads)
    assert np.all(speeds > 0)
    assert np.all(np.diff(speeds) <= 1e-9), "speed should not rise with load"
    assert profile.r2 > 0.9
    if profile.ttft_fit is not None:
        assert profile.ttft_fit.predict(100, 1) > 0
