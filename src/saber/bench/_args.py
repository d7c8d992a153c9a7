"""What the saber-bench commands share in reading their arguments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from saber.bench._grid import variant_kind
from saber.speed import MODELS


def csv(kind: Callable[[str], Any]) -> Callable[[str], tuple]:
    """An argparse type: ``"a,b"`` -> ``(kind("a"), kind("b"))``."""

    def parse(text: str) -> tuple:
        return tuple(kind(x) for x in text.split(",") if x.strip())

    return parse


def check_variants(variants: Iterable[str]) -> None:
    """Exit with a message naming every variant that is neither ``default`` nor a speed
    model then ``+option``s."""
    unknown = set()
    for variant in variants:
        try:
            kind = variant_kind(variant)
        except ValueError:
            kind = ""
        if kind not in MODELS:
            unknown.add(variant)
    if unknown:
        raise SystemExit(f"saber-bench: unknown variant(s): {', '.join(sorted(unknown))}")
