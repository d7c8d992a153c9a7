"""The interface every speed model f(L) implements."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from numbers import Real
from typing import Any, ClassVar, Self, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from saber.speed._data import FitData, FloatArray, prepare
from saber.speed._errors import FitError, ParamError
from saber.speed._fitting import Problem, solve

SPEED_FLOOR = 1e-3
"""Tokens/s. Predictions never go below it, so callers may divide by f(L)."""


class SpeedModel(ABC):
    """Per-request decode speed (tokens/s) when L requests run at once.

    `predict` treats loads below 1 as 1, returns a float for a scalar and an
    array for an array, and is always > 0. Instances are immutable.
    """

    kind: ClassVar[str]
    param_names: ClassVar[tuple[str, ...]]

    def __init__(self, **params: float) -> None:
        self._values = self._checked(params)

    @classmethod
    def from_params(cls, **params: float) -> Self:
        """Build a model from its parameters; a ValueError names any bad one."""
        return cls(**params)

    @classmethod
    def fit(cls, loads: ArrayLike, speeds: ArrayLike) -> Self:
        """Fit the model to measured (load, speed) points; raises FitError if it cannot."""
        data = prepare(loads, speeds)
        x = solve(cls._problem(data), data)
        try:
            return cls._from_vector(x)
        except ParamError as exc:
            raise FitError(f"{cls.kind} fit left its bounds: {exc}") from None

    @property
    def params(self) -> dict[str, float]:
        return dict(self._values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form; `MODELS[d["kind"]].from_params(**d["params"])` inverts it."""
        return {"kind": self.kind, "params": self.params}

    @overload
    def predict(self, load: float) -> float: ...
    @overload
    def predict(self, load: ArrayLike) -> FloatArray: ...
    def predict(self, load: float | ArrayLike) -> float | FloatArray:
        if isinstance(load, float | int):
            return self._scalar(load if load > 1.0 else 1.0)
        arr = np.maximum(np.asarray(load, dtype=float), 1.0)
        out = np.maximum(self._raw(self._vector(), arr), SPEED_FLOOR)
        return float(out) if out.ndim == 0 else out

    __call__ = predict

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpeedModel):
            return NotImplemented
        return type(self) is type(other) and self._values == other._values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}({args})"

    # What each model supplies.

    @abstractmethod
    def _scalar(self, load: float) -> float:
        """f(load) for a plain float load >= 1, floored at SPEED_FLOOR; no numpy."""

    @classmethod
    @abstractmethod
    def _check(cls, values: Mapping[str, float]) -> None:
        """Raise ParamError (via `_bad`) when a parameter is out of bounds."""

    @classmethod
    @abstractmethod
    def _problem(cls, data: FitData) -> Problem:
        """The least-squares problem, in the model's internal parameter vector."""

    @staticmethod
    @abstractmethod
    def _raw(x: FloatArray, loads: FloatArray) -> FloatArray:
        """Unfloored f(loads) for the internal parameter vector x."""

    @abstractmethod
    def _vector(self) -> FloatArray:
        """This model's internal parameter vector (the inverse of `_from_vector`)."""

    @classmethod
    @abstractmethod
    def _from_vector(cls, x: FloatArray) -> Self:
        """Build a model from a fitted internal parameter vector."""

    # Helpers.

    @classmethod
    def _bad(cls, param: str, reason: str) -> ParamError:
        return ParamError(cls.kind, param, reason)

    @classmethod
    def _checked(cls, params: Mapping[str, object]) -> dict[str, float]:
        expected = ", ".join(cls.param_names)
        for name in params:
            if name not in cls.param_names:
                raise cls._bad(name, f"is not a {cls.kind} parameter (expected {expected})")
        values: dict[str, float] = {}
        for name in cls.param_names:
            if name not in params:
                raise cls._bad(name, "is missing")
            value = params[name]
            if isinstance(value, bool) or not isinstance(value, Real):
                raise cls._bad(name, f"must be a number, got {value!r}")
            number = float(value)
            if not math.isfinite(number):
                raise cls._bad(name, f"must be finite, got {number}")
            values[name] = number
        cls._check(values)
        return values


def as_vector(*values: float) -> NDArray[np.float64]:
    return np.array(values, dtype=float)
