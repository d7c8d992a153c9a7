"""saber-gateway: the command line.

Settings come from the config file, ``SABER_*`` environment variables and these
flags, in increasing precedence. A bad setting or profile ends the process with
exit status 2 and a message naming the file, the field and the problem.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from saber._serving import bind
from saber.config import DEFAULT_GATEWAY_CONFIG, ClusterSettings, ConfigError
from saber.gateway.control.settings import load_settings
from saber.gateway.observe import logs as access_log
from saber.gateway.server import serve
from saber.speed import ProfileError

EXIT_BAD_SETTINGS = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="saber-gateway",
        description="SLA-aware admission control in front of one OpenAI-compatible backend (vLLM).",
        epilog="Every setting is also a SABER_* environment variable (see docs/gateway.md); "
        "precedence: flags > environment > file.",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("SABER_CONFIG"),
        help=f"YAML settings (SABER_CONFIG; default: the shipped {DEFAULT_GATEWAY_CONFIG.name})",
    )
    p.add_argument("--host", help="listen address (SABER_HOST)")
    p.add_argument("--port", type=int, help="listen port (SABER_PORT)")
    p.add_argument("--backend", metavar="URL", help="backend base URL (SABER_BACKEND_URL)")
    p.add_argument(
        "--profile", metavar="FILE", help="speed profile from saber-profile (SABER_PROFILE)"
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="default: info",
    )
    p.add_argument(
        "--check", action="store_true", help="check the settings and the profile, then exit"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {
        "host": args.host,
        "port": args.port,
        "backend.url": args.backend,
        "profile": args.profile,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    try:
        settings = load_settings(args.config, overrides=overrides)
    except (ConfigError, ProfileError) as exc:
        print(f"saber-gateway: cannot start: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    cfg = settings.config
    if args.check:
        note = " (the shipped default)" if settings.profile_is_default else ""
        backends = settings.backend_profiles()
        where = (
            f"backend {cfg.backend.url} ({cfg.backend.kind})"
            if not cfg.backends
            else f"{len(backends)} backends: "
            + ", ".join(
                f"{b.backend.name}={b.backend.settings.url} (profile {b.profile_path.name})"
                for b in backends
            )
            + f"; {cfg.cluster.gateways} gateway(s)"
            + _affinity(cfg.cluster)
        )
        print(
            f"saber-gateway: settings OK; {where}; listen {cfg.host}:{cfg.port}; "
            f"profile {settings.profile_path}{note}; tasks {', '.join(sorted(cfg.tasks))}"
        )
        return 0
    try:
        sock = bind(cfg.host, cfg.port)
    except OSError as exc:
        print(
            f"saber-gateway: cannot start: cannot listen on {cfg.host}:{cfg.port}: "
            f"{exc.strerror or exc} (set --port, SABER_PORT or 'port' in the config)",
            file=sys.stderr,
        )
        return EXIT_BAD_SETTINGS
    access_log.configure(args.log_level)
    host, port = sock.getsockname()[:2]
    logging.getLogger(access_log.GATEWAY_LOGGER).info(
        "saber-gateway listening", extra={"url": f"http://{host}:{port}"}
    )
    serve(settings, sock)
    return 0


def _affinity(cluster: ClusterSettings) -> str:
    """What --check says of session affinity (nothing while it is off)."""
    margin = cluster.affinity_margin
    if margin is None:
        return ""
    return f"; affinity within {margin} of the best, sessions by {cluster.affinity_header}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
