"""The gateway's import path stays lean: scipy is for fitting, matplotlib for plots and
rich for the CLIs' tables, none of which the proxy needs to serve (scipy alone took
0.55 s of its start)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("scipy", "matplotlib", "rich")


def imported_after(code: str) -> list[str]:
    """The HEAVY top-level packages loaded, in a fresh interpreter, by ``code``."""
    probe = (
        f"import json, sys\n{code}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_gateway_imports_no_scipy_matplotlib_or_rich() -> None:
    assert imported_after("import saber.gateway, saber.gateway.cli") == []


def test_evaluating_a_profile_and_its_ttft_fit_imports_no_scipy() -> None:
    code = (
        "from saber.config import DEFAULT_PROFILE_DIR\n"
        "from saber.speed import load_profile\n"
        "p = load_profile(DEFAULT_PROFILE_DIR / 'saber-sim-paper.json')\n"
        "assert p.speed_model()(8.0) > 0\n"
        "assert p.ttft_fit is None or p.ttft_fit.predict(100, 8.0) >= 0\n"
    )
    assert imported_after(code) == []


def test_fitting_does_import_scipy() -> None:
    # The probe itself can see scipy: the two tests above would pass on a broken probe.
    code = "from saber.speed import fit_ttft\nfit_ttft([1, 2, 3] * 4, [1, 2] * 6, [0.1] * 12)"
    assert "scipy" in imported_after(code)
