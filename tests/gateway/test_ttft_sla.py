"""Tasks with a TTFT SLA are admitted against the profile's TTFT fit when it has one,
and the gateway says so at start-up when it has none."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from gateway_support import GatewayFactory, settings_for

from saber.gateway import start_in_thread
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.sim.http import RunningSim
from saber.speed import TTFTFit, load_profile, save_profile


def _with_ttft_fit(profile: Path, out: Path, intercept_s: float) -> Path:
    fit = TTFTFit(
        intercept_s=intercept_s,
        per_prompt_token_s=0.0,
        per_load_s=0.01,
        per_prompt_token_load_s=0.0,
        r2=0.9,
        mape=0.1,
        n=64,
        prompt_tokens_max=2048,
        load_max=64,
    )
    save_profile(load_profile(profile).model_copy(update={"ttft_fit": fit}), out)
    return out


def _complete(url: str, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "def f(", "max_tokens": 4, "stream": True}
    return httpx.post(url + "/v1/completions", json=body, timeout=30)


def test_a_ttft_task_is_admitted_against_the_profiles_fit(
    sim: RunningSim, profile_path: Path, tmp_path: Path
) -> None:
    # A fit that says a first token takes 5 s: code_completion's 1 s TTFT SLA is out of
    # reach even alone, so the request is demoted at once and served best effort.
    slow = _with_ttft_fit(profile_path, tmp_path / "slow-ttft.json", intercept_s=5.0)
    with start_in_thread(settings_for(sim.url, slow)) as gw:
        ttft = gw.gateway.scheduler._ttft_fn
        assert ttft is not None and ttft(512, 1) == pytest.approx(5.0)
        r = _complete(gw.url, sim.model)
        assert r.status_code == 200
        assert (r.headers["x-saber-task"], r.headers["x-saber-outcome"]) == (
            "code_completion",
            "admitted_demoted",
        )
        status = httpx.get(gw.url + "/saber/status").json()
        assert status["profile"]["ttft_fit"]["intercept_s"] == 5.0

    # A fast first token: admitted from the high-priority queue.
    fast = _with_ttft_fit(profile_path, tmp_path / "fast-ttft.json", intercept_s=0.05)
    with start_in_thread(settings_for(sim.url, fast)) as gw:
        r = _complete(gw.url, sim.model)
        assert (r.status_code, r.headers["x-saber-outcome"]) == (200, "admitted")


def test_without_a_ttft_fit_the_gateway_warns(
    gateway_factory: GatewayFactory,
    sim: RunningSim,
    profile_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=GATEWAY_LOGGER)
    assert load_profile(profile_path).ttft_fit is None
    gw = gateway_factory(sim.url)
    assert gw.gateway.scheduler._ttft_fn is None
    warned = [r for r in caplog.records if "no TTFT fit" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].ttft_tasks == ["code_completion", "code_qna"]  # type: ignore[attr-defined]
    assert httpx.get(gw.url + "/saber/status").json()["profile"]["ttft_fit"] is None
