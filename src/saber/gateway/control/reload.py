"""Reload without restart: on SIGHUP, or when the config or profile file changes.

The settings are read again exactly as at start-up (the same file, environment
and flags) and the profile they name is loaded, both checked as at start-up,
off the event loop. A bad file is refused with a log line (``reload refused``)
and counted; the settings in force stay. Good ones are swapped in at once, between
two events of the loop, so no request sees half of each: requests already
accepted keep the task type and deadline they arrived with, and the next ones
get the new settings.

Applied live: task types, aliases, rules, ``default_task``, keys and the metrics
access, ``task_max_tokens``, ``max_concurrency``, ``max_sequences_per_request``,
``queue_cap``, the profiles (a backend's curve and calibration start again from its
own), and every limit and interval the gateway reads per request or connection.
``RESTART`` lists what a reload cannot change: a change there is logged and the
running value kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from saber._serving import cancel_and_wait
from saber.config import DEFAULT_GATEWAY_CONFIG, ConfigError, GatewayConfig
from saber.gateway.control.settings import GatewaySettings, reload_settings
from saber.gateway.observe.logs import GATEWAY_LOGGER
from saber.gateway.observe.metrics import GatewayMetrics
from saber.speed import ProfileError

log = logging.getLogger(GATEWAY_LOGGER)

RESTART = (
    "host",
    "port",
    "backend",
    "backends",
    "cluster",
    "policy",
    "window_size",
    "order",
    "protection",
    "lpq",
    "calibrate",
    "learn_lengths",
    "condition_lengths",
    "prefill",
    "refit",
    "state_file",
    "seed",
    "passthrough",
)
"""Settings read once at start-up: the listening socket, the upstream client, the
scheduler's policy and random window, the learning loop, the pass-through gate."""


class Reloader:
    """Reloads one gateway's settings; at most one reload runs at a time."""

    def __init__(
        self,
        settings: Callable[[], GatewaySettings],
        apply: Callable[[GatewaySettings], None],
        metrics: GatewayMetrics,
    ) -> None:
        self._settings = settings  # those in force
        self._apply = apply  # swaps new ones in
        self._metrics = metrics
        self._lock = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None

    async def reload(self, settings: GatewaySettings | None = None, *, trigger: str) -> bool:
        """Read the settings again (or take ``settings``) and apply them; False if they
        were refused."""
        async with self._lock:
            current = self._settings()
            if settings is None:
                source = current.source
                if source is None:
                    log.warning("cannot reload: the settings were not read from files")
                    return False
                try:
                    settings = await asyncio.to_thread(reload_settings, source)
                except (ConfigError, ProfileError) as exc:
                    self._metrics.reloads.labels("refused").inc()
                    log.error(
                        "reload refused: the settings in force stay",
                        extra={"trigger": trigger, "error": str(exc)},
                    )
                    return False
            old = current.config
            kept = [f for f in RESTART if getattr(settings.config, f) != getattr(old, f)]
            config = settings.config.model_copy(update={f: getattr(old, f) for f in kept})
            changed = _changed(old, config)
            now = current.backend_profiles()
            backends = now if "backends" in kept else settings.backend_profiles()
            profile_changed = settings.profile != current.profile or [
                b.profile for b in backends
            ] != [b.profile for b in now]
            self._apply(
                replace(
                    settings,
                    config=config,
                    source=settings.source or current.source,
                    backends=backends,
                )
            )
            self._metrics.reloads.labels("applied").inc()
            if kept:
                log.warning(
                    "reload: these settings changed but need a restart; still in force: "
                    "the old values",
                    extra={"needs_restart": kept},
                )
            log.info(
                "settings reloaded",
                extra={
                    "trigger": trigger,
                    "changed": changed,
                    "profile": str(settings.profile_path),
                    "profile_changed": profile_changed,
                },
            )
            return True

    # -- watching the files --------------------------------------------------------

    def start(self) -> None:
        if self._settings().source is not None:
            self._watch = asyncio.get_running_loop().create_task(self._loop(), name="saber-reload")

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)

    async def _loop(self) -> None:
        seen = self._stamps()
        while True:
            interval = self._settings().config.reload_interval_s
            await asyncio.sleep(interval or 1.0)
            if not interval:
                seen = self._stamps()
                continue
            now = self._stamps()
            if now != seen:
                seen = now
                try:
                    await self.reload(trigger="file change")
                except Exception:  # a reload must never stop the gateway
                    log.exception("reloading the settings failed")

    def _stamps(self) -> list[tuple[int, int, int] | None]:
        settings = self._settings()
        source = settings.source
        config = source.config_path if source is not None else None
        profiles = {settings.profile_path, *(b.profile_path for b in settings.backends)}
        return [_stamp(config or DEFAULT_GATEWAY_CONFIG), *map(_stamp, sorted(profiles))]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _changed(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The settings (top-level names, never their values) that differ."""
    out: list[str] = []
    for name in type(new).model_fields:
        a: Any = getattr(old, name)
        b: Any = getattr(new, name)
        if a != b:
            out.append(name)
    return out
