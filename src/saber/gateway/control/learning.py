"""What the gateway learns from what it serves, around the pure scheduler.

The scheduler learns lengths and its calibration by itself, from each ``finish``.
This module does the rest, which needs a clock, a thread or a file:

- every finished request's observation (time-averaged load, speed, and what was
  predicted for it) goes into a window (``saber.speed.LiveFit``) and into the
  metrics, as observed over predicted speed, and as observed over the loaded
  profile, which says whether the profile still describes the engine;
- every ``refit.interval_s`` a background task refits f(L) on the window with the
  offline fitter, off the event loop, and swaps the live curve in when it departs
  from the one in use by more than ``refit.margin``; every refit is counted and
  every swap logged;
- ``state_file``: the learned lengths (with their conditionings), the bytes per prompt
  token, the calibration and the live curve are read at start and written at shutdown,
  so a restart does not forget them.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import statistics
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saber._serving import cancel_and_wait
from saber.config import GatewayConfig
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.observe.metrics import GatewayMetrics
from saber.scheduler import Observation, Scheduler, SpeedFn
from saber.speed import MODELS, LiveFit, SpeedModel

log = logging.getLogger(GATEWAY_LOGGER)

STATE_VERSION = 1
PROFILE_RATIO_POINTS = 200
"""The recent finished requests over which observed speed is compared with the profile."""


def over_profile(seen: Observation, current: SpeedFn, profile: SpeedFn) -> float:
    """A finished request's speed over what the loaded profile predicted for it: the
    curve in use's mean over its run (``seen.expected``), carried over to the profile
    where a refit swapped another curve in."""
    if current is profile:
        return seen.speed / seen.expected
    return seen.speed / seen.expected * current(seen.load) / profile(seen.load)


class Learning:
    """The gateway's closed loop outside the scheduler: observations, refits, state."""

    def __init__(
        self,
        scheduler: Scheduler,
        metrics: GatewayMetrics,
        profile: SpeedModel,
        config: Callable[[], GatewayConfig],
        clock: Callable[[], float],
        *,
        state_suffix: str = "",
    ) -> None:
        """``state_suffix``: of several backends, each keeps its state in the state
        file's name + "." + this."""
        self._scheduler = scheduler
        self._state_suffix = state_suffix
        self._metrics = metrics
        self._config = config  # the settings in force
        self._clock = clock  # the admission clock
        settings = config().refit
        self.enabled = settings.enabled
        self.fit = LiveFit(
            window=settings.window,
            min_points=settings.min_points,
            every=settings.every,
            margin=settings.margin,
        )
        self.profile = profile
        self._profile_ratios: deque[float] = deque(maxlen=PROFILE_RATIO_POINTS)
        # Observed over what admission predicted (calibration included), since the
        # curve in use last changed: is the gateway's prediction true now?
        self._predicted_ratios: deque[float] = deque(maxlen=PROFILE_RATIO_POINTS)
        self._since_swap = 0
        self._task: asyncio.Task[None] | None = None
        self.swapped_at: float | None = None

    # -- observations ------------------------------------------------------------------

    def drain(self) -> None:
        """Take the scheduler's new observations: metrics, the refit window. O(1) each."""
        sched, metrics = self._scheduler, self._metrics
        while sched.observations:
            seen = sched.observations.popleft()
            if seen.predicted > 0:
                metrics.speed_ratio.observe(seen.speed / seen.predicted)
                self._predicted_ratios.append(seen.speed / seen.predicted)
                self._since_swap += 1
            self._profile_ratios.append(over_profile(seen, sched.speed_model, self.profile))
            self.fit.observe(seen.load, seen.speed)

    def profile_ratio(self) -> float | None:
        """Median of observed over the loaded profile's speed, over the latest finished
        requests (up to PROFILE_RATIO_POINTS); None before the first."""
        if not self._profile_ratios:
            return None
        return statistics.median(self._profile_ratios)

    def predicted_ratio(self) -> float | None:
        """Median of observed over predicted speed, over the latest finished requests
        since the curve in use last changed; None before the first."""
        if not self._predicted_ratios:
            return None
        return statistics.median(self._predicted_ratios)

    def new_profile(self, profile: SpeedModel) -> None:
        """A reload brought another profile: compare the engine with it from now on."""
        self.profile = profile
        self._profile_ratios.clear()
        self._curve_changed()

    def _curve_changed(self) -> None:
        self._predicted_ratios.clear()
        self._since_swap = 0

    # -- the refit loop ----------------------------------------------------------------

    async def start(self) -> None:
        self._load_state()
        if self.enabled:
            self._task = asyncio.create_task(self._loop(), name="saber-refit")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self.drain()
        self._save_state()

    async def _loop(self) -> None:
        # A refit fits with scipy.optimize, 41 MB resident once imported: import it now,
        # so that the gateway's memory is whole from the start rather than jumping at the
        # first refit, minutes in (where a soak read it as growth with requests served).
        await asyncio.to_thread(importlib.import_module, "scipy.optimize")
        interval = self._config().refit.interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.refit()
            except Exception:  # a refit must never stop the gateway
                log.exception("refitting the speed model failed")

    async def refit(self) -> bool:
        """One refit if one is due; True if the live curve was swapped in."""
        self.drain()
        current = self._scheduler.speed_model
        if not self.fit.due() or not isinstance(current, SpeedModel):
            return False
        loads, speeds = self.fit.snapshot()
        result = await asyncio.to_thread(self.fit.judge, current, current.kind, loads, speeds)
        metrics = self._metrics
        if result is None:
            metrics.refits.labels("unfit").inc()
            return False
        metrics.departure.set(result.departure)
        if not result.swap:
            metrics.refits.labels("kept").inc()
            return False
        metrics.refits.labels("swapped").inc()
        self._scheduler.set_speed_model(result.model)
        self._curve_changed()
        self.swapped_at = self._clock()
        log.warning(
            "speed model swapped: the engine departs from the curve in use",
            extra={
                "departure": round(result.departure, 3),
                "loads": [round(x, 2) for x in result.loads],
                "points": result.points,
                "kind": result.model.kind,
                "old_params": current.params,
                "new_params": result.model.params,
                "f1_old": round(current(1.0), 2),
                "f1_new": round(result.model(1.0), 2),
            },
        )
        return True

    def summary(self) -> dict[str, Any]:
        self.drain()
        last = self.fit.last
        model = self._scheduler.speed_model
        return {
            "refit": self.enabled,
            "points": len(self.fit),
            "refits": self.fit.refits,
            "swaps": self.fit.swaps,
            "last_departure": None if last is None else round(last.departure, 4),
            "live_model": model.to_dict() if isinstance(model, SpeedModel) else None,
            "observed_over_profile": _round(self.profile_ratio()),
            "observed_over_predicted": _round(self.predicted_ratio()),
            "observed_since_swap": self._since_swap,
        }

    # -- state across restarts -----------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        return self.profile.to_dict()

    def _state_path(self) -> Path | None:
        path = self._config().state_file
        if path is None or not self._state_suffix:
            return path
        return path.with_name(f"{path.name}.{self._state_suffix}")

    def _save_state(self) -> None:
        path = self._state_path()
        if path is None:
            return
        sched = self._scheduler
        model = sched.speed_model
        state = {
            "version": STATE_VERSION,
            "profile": self._fingerprint(),
            "lengths": sched.lengths.state(),
            "prompt_size": sched.lengths.prompts.state(),
            "calibration": sched.calibration,
            # The gateway only ever swaps in fitted SpeedModels.
            "live_model": model.to_dict()
            if isinstance(model, SpeedModel) and model is not self.profile
            else None,
        }
        tmp = Path(f"{path}.tmp")
        try:
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError as exc:
            log.error("cannot write the state file", extra={"path": str(path), "error": str(exc)})
            return
        log.info("state saved", extra={"path": str(path)})

    def _load_state(self) -> None:
        path = self._state_path()
        if path is None or not Path(path).exists():
            return
        sched = self._scheduler
        try:
            state = json.loads(Path(path).read_text())
            if state.get("version") != STATE_VERSION:
                raise ValueError(f"version {state.get('version')!r}, expected {STATE_VERSION}")
            tasks = sched.lengths.restore(state.get("lengths") or {})
            if state.get("prompt_size"):  # bytes per token: the model's, not the profile's
                sched.lengths.prompts.restore(state["prompt_size"])
            same_profile = state.get("profile") == self._fingerprint()
            live = state.get("live_model")
            if same_profile and live:
                sched.set_speed_model(MODELS[live["kind"]].from_params(**live["params"]))
            if same_profile and sched.policy.calibrate:
                sched.set_calibration(state["calibration"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "ignoring an unusable state file", extra={"path": str(path), "error": str(exc)}
            )
            return
        log.info(
            "state restored",
            extra={
                "path": str(path),
                "lengths": tasks,
                "live_model": bool(live) and same_profile,
                "profile_changed": not same_profile,
            },
        )


def _round(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 4)
