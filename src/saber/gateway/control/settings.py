"""What the gateway starts from: its configuration and the speed profile it found.

Both are checked here, before any socket is opened, so that a wrong setting
stops the process with a message instead of failing the first request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from saber.config import Backend, GatewayConfig, load_gateway_config
from saber.scheduler import TTFTFn
from saber.speed import Profile, ProfileError, SpeedModel, load_profile


@dataclass(frozen=True)
class SettingsSource:
    """Where settings were read from, so that a reload reads them the same way."""

    config_path: Path | None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] | None = None  # None: the process environment, read again


@dataclass(frozen=True)
class BackendProfile:
    """One backend and the profile its speed model starts from (its own, or the
    gateway's ``profile``)."""

    backend: Backend
    profile: Profile
    profile_path: Path

    def speed_model(self) -> SpeedModel:
        return self.profile.speed_model()

    def speed_sigma(self) -> float:
        """The profile's own error as a spread of log speed: its mean relative error
        (MAPE) is about 0.8 sigma of a normal; the scheduler starts from it."""
        return 1.25 * self.profile.mape

    def ttft(self) -> TTFTFn | None:
        """The profile's TTFT fit as the scheduler takes it; None without one."""
        fit = self.profile.ttft_fit
        return None if fit is None else fit.predict

    def prefill(self) -> tuple[float, float] | None:
        """The profile's prefill (``TTFTFit.prefill``) as the scheduler takes it."""
        fit = self.profile.ttft_fit
        return None if fit is None else fit.prefill


@dataclass(frozen=True)
class GatewaySettings:
    config: GatewayConfig
    profile: Profile
    profile_path: Path
    profile_is_default: bool
    """True when no profile was configured and the shipped default is in use."""
    source: SettingsSource | None = None
    """How to read them again (a reload); None: they were built in code."""
    backends: tuple[BackendProfile, ...] = ()
    """Each backend served, with its profile (``settings_from_config``)."""

    def backend_profiles(self) -> tuple[BackendProfile, ...]:
        """The backends, each with its profile; built in code without them, each of the
        config's backends on ``profile``."""
        if self.backends:
            return self.backends
        return tuple(
            BackendProfile(b, self.profile, self.profile_path) for b in self.config.backend_list()
        )


def settings_from_config(config: GatewayConfig) -> GatewaySettings:
    """Load the profiles the config names (the gateway's, or the shipped default, and
    each backend's own); ProfileError if one is bad."""
    path = config.profile_path()
    is_default = config.profile is None
    try:
        profile = _load(path)
    except ProfileError as exc:
        if is_default:
            raise ProfileError(
                f"{exc} (no profile is configured, so the gateway looked for the default one "
                "shipped for saber-sim's paper preset; set 'profile' in the config, "
                "SABER_PROFILE or --profile to a file made by saber-profile)"
            ) from None
        raise
    loaded = {path: profile}  # replicas of one profile share it
    backends = []
    for backend in config.backend_list():
        own = backend.profile or path
        if own not in loaded:
            loaded[own] = _load(own)
        backends.append(BackendProfile(backend, loaded[own], own))
    return GatewaySettings(config, profile, path, is_default, backends=tuple(backends))


def _load(path: Path) -> Profile:
    profile = load_profile(path)
    try:
        speed = profile.speed_model()
        f1 = speed(1.0)
    except ValueError as exc:  # pragma: no cover - load_profile already checks the params
        raise ProfileError(f"{path}: unusable speed model: {exc}") from None
    if not f1 > 0:  # pragma: no cover - every model is floored above 0
        raise ProfileError(f"{path}: the speed model predicts f(1) = {f1}; it must be > 0")
    return profile


def load_settings(
    config_path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> GatewaySettings:
    """Config (flags > environment > file) and profile; ConfigError or ProfileError."""
    settings = settings_from_config(load_gateway_config(config_path, env=env, overrides=overrides))
    path = Path(config_path) if config_path is not None else None
    return replace(settings, source=SettingsSource(path, dict(overrides or {}), env))


def reload_settings(source: SettingsSource) -> GatewaySettings:
    """Read settings again from where they came; ConfigError or ProfileError."""
    return load_settings(source.config_path, env=source.env, overrides=source.overrides)
