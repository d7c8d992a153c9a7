"""Per-request measurements, and the JSONL file that keeps them for ``--resume``.

The points file sits next to the profile (``<out>.points.jsonl``) and is written
as the run goes, one flushed line per finished request, so an interrupted run
loses nothing it measured. Lines are JSON objects with a ``type``:

- ``run``: the first line, the settings the run was started with;
- ``point``: one request (warm-up ones too, flagged, so the file is the whole record);
- ``level``: a level ended, ``done`` or ``saturated`` (the backend queued requests);
- ``drop``: a round of a level that disagreed with the others and was measured again;
  its points stay in the file but are not fitted.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from saber.profile.errors import ProfileRunError

LevelStatus = Literal["done", "saturated"]

AGREEMENT = 0.10
"""A level's rounds agree when their mean speeds are within 10% of each other."""


@dataclass(frozen=True, slots=True)
class Point:
    """One finished request.

    ``exec_s`` runs from sending the request to the end of its stream, so it
    includes queueing and prefill (TTFT): ``speed`` = output_tokens / exec_s is
    the rate a client sees, the same quantity the gateway compares with a
    request's required speed, expected tokens / time left to its deadline.
    ``load`` is the time average of the requests in flight (this one included)
    over the request's life; ``level`` is the load level the loop was holding.
    """

    level: int
    load: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    ttft_s: float | None
    exec_s: float
    start_s: float
    task: str | None = None
    warmup: bool = False
    round: int = 0
    """Which visit of its level measured it (a level is measured in rounds)."""

    @property
    def speed(self) -> float:
        return self.output_tokens / self.exec_s

    def to_json(self) -> dict[str, Any]:
        return {"type": "point", **asdict(self), "speed": self.speed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Point:
        fields = {k: v for k, v in data.items() if k not in ("type", "speed")}
        return cls(**fields)


@dataclass
class LevelEnd:
    level: int
    status: LevelStatus
    running: int | None = None
    waiting: int | None = None


@dataclass
class Recorded:
    """What a points file holds: the run's settings, its points, and the levels that ended."""

    settings: dict[str, Any]
    points: list[Point] = field(default_factory=list)
    ended: dict[int, LevelEnd] = field(default_factory=dict)
    dropped: set[tuple[int, int]] = field(default_factory=set)
    """(level, round) of the rounds measured again and left out of the fit."""

    def counted(self, level: int, round: int | None = None) -> list[Point]:
        """The counted points of ``level`` (of one ``round``): no warm-up, none dropped."""
        return [
            p
            for p in self.points
            if p.level == level
            and not p.warmup
            and (round is None or p.round == round)
            and (p.level, p.round) not in self.dropped
        ]

    def measured(self, level: int, round: int | None = None) -> int:
        return len(self.counted(level, round))

    @property
    def saturated(self) -> LevelEnd | None:
        hits = [end for end in self.ended.values() if end.status == "saturated"]
        return min(hits, key=lambda e: e.level) if hits else None

    def fit_points(self) -> list[Point]:
        """The points a fit uses: no warm-up, no dropped round, nothing from a saturated
        level or above."""
        limit = self.saturated
        return [
            p
            for p in self.points
            if not p.warmup
            and (p.level, p.round) not in self.dropped
            and (limit is None or p.level < limit.level)
        ]


def points_path(out: Path) -> Path:
    """Where the points of a run that writes the profile ``out`` are kept."""
    return out.with_name(out.name + ".points.jsonl")


class PointsFile:
    """Appends records to the points file, a flushed line each.

    Nothing touches the disk until ``open()``, which the run calls once the
    backend has been checked: a mistyped URL must not replace an earlier run's
    points.
    """

    def __init__(self, path: Path, recorded: Recorded, *, resume: bool) -> None:
        self.path = path
        self.recorded = recorded
        self.resuming = resume
        self._fh: TextIO | None = None

    @classmethod
    def create(cls, path: Path, settings: dict[str, Any]) -> PointsFile:
        """A new run's file; ``open()`` writes it, replacing any earlier one."""
        return cls(path, Recorded(settings), resume=False)

    @classmethod
    def resume(cls, path: Path) -> PointsFile:
        """An interrupted run's file, read now; ``open()`` appends to it."""
        return cls(path, read_points(path), resume=True)

    def open(self) -> bool:
        """Open for writing; True when an earlier run's points were replaced."""
        if self._fh is not None:
            return False
        if self.resuming:
            data = self.path.read_bytes()
            whole = data.rfind(b"\n") + 1
            if whole < len(data):  # a torn last line: the run was killed mid-write
                with self.path.open("r+b") as fh:
                    fh.truncate(whole)
            self._fh = self.path.open("a", encoding="utf-8")
            return False
        replaced = self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("w", encoding="utf-8")
        self._write({"type": "run", **self.recorded.settings})
        return replaced

    def add(self, point: Point) -> None:
        self.recorded.points.append(point)
        self._write(point.to_json())

    def end_level(self, end: LevelEnd) -> None:
        self.recorded.ended[end.level] = end
        self._write({"type": "level", **asdict(end)})

    def drop(self, level: int, round: int) -> None:
        """Leave a round of a level out of the fit (its points stay in the file)."""
        self.recorded.dropped.add((level, round))
        self._write({"type": "drop", "level": level, "round": round})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _write(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            self.open()
        assert self._fh is not None
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()


def read_points(path: Path) -> Recorded:
    """Read a points file; a torn last line (the run was killed mid-write) is skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ProfileRunError(f"no points file to resume: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileRunError(f"cannot read points file {path}: {exc}") from None
    recorded: Recorded | None = None
    for lineno, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if lineno == len(lines):
                break
            raise ProfileRunError(
                f"{path}:{lineno}: not JSON: the points file is damaged"
            ) from None
        kind = data.get("type") if isinstance(data, dict) else None
        try:
            if kind == "run" and recorded is None:
                recorded = Recorded({k: v for k, v in data.items() if k != "type"})
            elif recorded is None:
                break
            elif kind == "point":
                recorded.points.append(Point.from_json(data))
            elif kind == "level":
                end = LevelEnd(**{k: v for k, v in data.items() if k != "type"})
                recorded.ended[end.level] = end
            elif kind == "drop":
                recorded.dropped.add((int(data["level"]), int(data["round"])))
        except (TypeError, KeyError, ValueError) as exc:
            raise ProfileRunError(f"{path}:{lineno}: unexpected record: {exc}") from None
    if recorded is None:
        raise ProfileRunError(f"{path} is not a saber-profile points file (no run line first)")
    return recorded


def agree(rounds: Sequence[Sequence[float]]) -> bool:
    """Whether rounds of one level measured the same speed: their means within
    ``AGREEMENT`` of each other, or closer than three standard errors of the difference
    (a task mix spreads speeds widely, and a few points say little about their mean)."""
    stats = [(statistics.fmean(v), statistics.variance(v) / len(v) if len(v) > 1 else 0.0)
             for v in rounds if v]  # fmt: skip
    if len(stats) < 2:
        return True
    (low, low_var), (high, high_var) = min(stats), max(stats)
    return high <= (1.0 + AGREEMENT) * low or high - low <= 3.0 * math.sqrt(low_var + high_var)
