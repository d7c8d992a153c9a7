"""A real saber-gateway, in its own process, in front of a real engine.

Its own process, as in production, rather than a thread of the test process: there it
would share one GIL with the test's SDK clients, which parse thousands of chunks, and
its timeouts and answers would measure the test process as much as the gateway.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness._process import EngineProcess, free_port
from saber.speed import USLModel, build_profile, save_profile

# f(1) = 600 tokens/s, falling slowly with load: admits everything a test sends, so a
# test of the wire contract is not at the mercy of the admission policy.
GENEROUS = USLModel(lam=600.0, sigma=0.1, kappa=0.002)


def write_profile(path: Path, model: USLModel = GENEROUS, *, backend: str = "sim") -> Path:
    """A speed profile file for ``model`` (points from L = 1..64)."""
    loads = np.repeat(np.arange(1, 65, dtype=float), 4)
    prof = build_profile(model, loads, model.predict(loads), backend=backend, model_name="test")
    save_profile(prof, path)
    return path


def setting_env(overrides: dict[str, Any]) -> dict[str, str]:
    """Dotted settings as saber-gateway's environment variables
    (``backend.read_timeout_s`` -> ``SABER_BACKEND_READ_TIMEOUT_S``)."""
    return {
        "SABER_" + key.replace(".", "_").upper(): str(value) for key, value in overrides.items()
    }


@dataclass
class EngineGateway:
    """saber-gateway serving on 127.0.0.1 in front of ``engine``."""

    url: str  # the gateway, without /v1
    engine: EngineProcess
    process: EngineProcess  # the gateway's own process (kind "gateway")

    @property
    def api_url(self) -> str:
        """The OpenAI ``base_url`` for clients."""
        return self.url + "/v1"

    def stop(self) -> None:
        self.process.stop(grace_s=10.0)


def gateway_process(
    *,
    model: str,
    backend: str | None = None,
    profile: Path | None = None,
    config: Path | None = None,
    settings: dict[str, Any] | None = None,
    clean_env: bool = False,
    log_path: Path | None = None,
    startup_timeout_s: float = 60.0,
) -> EngineProcess:
    """saber-gateway as a process on a free 127.0.0.1 port, not started yet: with
    ``config`` (default: the shipped one), ``backend`` and ``profile`` as flags, and
    ``settings`` as its environment variables (dotted names, ``setting_env``). With
    ``clean_env``, none of this process's own ``SABER_*`` variables reach it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not (clean_env and k.startswith("SABER_"))}
    argv = [
        sys.executable, "-m", "saber.gateway.cli",
        *(["--backend", backend] if backend else []),
        *(["--profile", str(profile)] if profile else []),
        *(["--config", str(config)] if config else []),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--log-level", "info",  # one JSON line per request, in the log file
    ]  # fmt: skip
    return EngineProcess(
        "gateway",
        argv,
        port=port,
        model=model,
        env={**env, **setting_env(settings or {})},
        log_path=log_path,
        startup_timeout_s=startup_timeout_s,
    )


def start_gateway(
    engine: EngineProcess,
    profile: Path,
    *,
    config: Path | None = None,
    startup_timeout_s: float = 60.0,
    **overrides: Any,
) -> EngineGateway:
    """Start saber-gateway for ``engine``, with ``config`` (default: the shipped one);
    ``overrides`` are dotted settings (``**{"backend.read_timeout_s": 60}``). The engine
    must be up: start-up returns at the gateway's first 200 on /health, which asks the
    engine's."""
    process = gateway_process(
        model=engine.model,
        backend=engine.base_url,
        profile=profile,
        config=config,
        settings=overrides,
        startup_timeout_s=startup_timeout_s,
    )
    process.start()
    return EngineGateway(process.base_url, engine, process)
