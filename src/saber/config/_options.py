"""Command-line options that name a shipped config file, the same way in every tool."""

from __future__ import annotations

import argparse
from pathlib import Path

from saber.config._tasks import DEFAULT_CONFIG_DIR


def add_config_file(parser: argparse.ArgumentParser, name: str, what: str) -> None:
    """``--NAME FILE``, by default the shipped ``configs/NAME.yaml``."""
    parser.add_argument(
        f"--{name}",
        type=Path,
        default=DEFAULT_CONFIG_DIR / f"{name}.yaml",
        metavar="FILE",
        help=f"{what} (default: the shipped configs/{name}.yaml)",
    )
