"""Exceptions injected into a live gateway, at each step of an exchange (imported as a module).

The gateway runs in a thread of the test process, so its objects can be wrapped in
place: each step's wrapper raises ``Injected`` the first time it is reached after
``arm``, then does the real work again. ``disarm`` puts everything back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from harness import metric_value
from saber import wire
from saber.gateway import RunningGateway
from saber.gateway.exchange.meter import StreamMeter
from saber.scheduler import Action, Decision

STEPS = (
    "classify",  # the task resolver
    "offer",  # Scheduler.offer
    "admit",  # the ADMIT decision being applied
    "open",  # opening the upstream response
    "first_frame",  # the stream's first event
    "middle_frame",  # its third
    "last_frame",  # its data: [DONE]
    "body",  # reading a whole answer's usage
    "release",  # Scheduler.finish, inside finalize
)
STREAM_ONLY = {"first_frame", "middle_frame", "last_frame"}
WHOLE_ONLY = {"body"}


class Injected(RuntimeError):
    """The exception a test put there."""


class Injector:
    """Arms one exception at one step of a running gateway's exchanges."""

    def __init__(self, gw: RunningGateway) -> None:
        self.g = gw.gateway
        self.armed: str | None = None
        self.fired = 0
        self._events = 0  # stream events seen since arming
        self._undo: list[Callable[[], None]] = []
        g = self.g
        self._wrap(g.resolver, "resolve", "classify")
        self._wrap(g.scheduler, "offer", "offer")
        self._wrap(g.scheduler, "finish", "release")
        self._wrap(g.upstream, "open", "open")
        self._wrap(wire, "completion_tokens", "body")
        on_decision = g.admission.on_decision

        def decided(d: Decision) -> None:
            if d.action is Action.ADMIT:
                self._maybe_fire("admit")
            if on_decision is not None:
                on_decision(d)

        self._patch(g.admission, "on_decision", decided)
        process = StreamMeter.process
        injector = self

        def frame(meter: StreamMeter, event: bytes) -> bytes | None:
            injector._events += 1
            if injector._events == 1:
                injector._maybe_fire("first_frame")
            if injector._events == 3:
                injector._maybe_fire("middle_frame")
            if event == b"data: [DONE]":
                injector._maybe_fire("last_frame")
            return process(meter, event)

        self._patch(StreamMeter, "process", frame)

    def arm(self, step: str) -> None:
        assert step in STEPS
        self._events = 0
        self.armed = step

    def disarm(self) -> None:
        self.armed = None
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def _maybe_fire(self, step: str) -> None:
        if self.armed == step:
            self.armed = None
            self.fired += 1
            raise Injected(f"injected at {step}")

    def _wrap(self, owner: Any, name: str, step: str) -> None:
        real = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self._maybe_fire(step)
            return real(*args, **kwargs)

        self._patch(owner, name, wrapper)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        old = vars(owner).get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, old) if had else delattr(owner, name))


def applies(step: str, stream: bool) -> bool:
    return not ((step in STREAM_ONLY and not stream) or (step in WHOLE_ONLY and stream))


def counts(gw: RunningGateway) -> dict[str, float]:
    """Requests counted in /metrics, in all and by outcome; what is in flight and queued."""
    text = httpx.get(gw.url + "/metrics").text
    return {
        "total": metric_value(text, "saber_requests_total"),
        "internal_error": metric_value(text, "saber_requests_total", outcome="internal_error"),
        "cancelled": metric_value(text, "saber_requests_total", outcome="cancelled_queued")
        + metric_value(text, "saber_requests_total", outcome="cancelled_running"),
        "in_flight": metric_value(text, "saber_requests_in_flight"),
        "queued": metric_value(text, "saber_queue_depth"),
    }
