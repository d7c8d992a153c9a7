"""A saber-sim server on 127.0.0.1 shared by the tests of a module, and helpers."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from harness import wait_for
from saber.sim.http import RunningSim, serve_in_thread

# Fast enough to keep tests short; these tests check the wire, not timing (the
# fidelity test runs its own server at a gentler scale).
TEST_TIME_SCALE = 10.0


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=TEST_TIME_SCALE, max_model_len=4096, seed=1) as running:
        yield running


@pytest.fixture
def scrape() -> Callable[..., float]:
    """``scrape(url, name, **labels)``: one sample from a server's /metrics."""
    return metric


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of ``name`` from the server's /metrics."""
    text = httpx.get(f"{url}/metrics").text
    for line in text.splitlines():
        m = re.match(r"^([^{\s]+)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    raise KeyError(name)


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Callable[..., Any]:
    """``harness.wait_for``, polling every 2 ms: returns the value awaited, or fails
    with the last one seen."""
    return functools.partial(wait_for, step=0.002)
