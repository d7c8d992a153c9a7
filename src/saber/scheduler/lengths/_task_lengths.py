"""What the scheduler expects each request's answer to be: per task type, learned from
every finished answer, and conditioned on what the request carries where that predicts
better (``saber.scheduler.lengths._conditioned``); and each prompt's size in tokens from its
bytes (``saber.scheduler.lengths._prompt_size``).

A request's distribution is named by ``Dist``: None for its task's own, else the
conditioning in use and the request's key under it. Requests of one task and one
``Dist`` share a distribution, and so one kind (``SchedRequest.kind``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from saber.config import TaskType
from saber.scheduler.lengths._conditioned import NOTHING, Carried, Conditioned, Key
from saber.scheduler.lengths._histogram import LengthEstimate
from saber.scheduler.lengths._prompt_size import PromptSize

Dist = tuple[int, Key] | None
"""Which distribution a request's length follows: None, its task's; else (the index of
a conditioning, the request's key under it)."""


class TaskLengths:
    """What the scheduler expects each task type's answers to be.

    With ``learn`` off it is the paper's set-up: every request of a task is
    expected to generate the task's configured length (bounded by its cap).
    With ``condition`` (and ``learn``) a task's requests may each have a distribution
    of their own, given what they carry, where the task's traffic shows it predicts
    better than the task's.
    """

    def __init__(
        self, tasks: Iterable[TaskType] = (), *, learn: bool = False, condition: bool = True
    ) -> None:
        self.learn = learn
        self.condition = learn and condition
        self._tasks = {t.name: t for t in tasks}
        self._est: dict[str, LengthEstimate] = {}
        self._cond: dict[str, Conditioned] = {}
        self.prompts = PromptSize()
        for task in self._tasks.values():
            self._add_estimates(task)

    def _add_estimates(self, task: TaskType) -> None:
        if self.learn and task.name not in self._est:
            est = self._est[task.name] = LengthEstimate(task.expected_tokens)
            if self.condition:
                self._cond[task.name] = Conditioned(est)

    def add(self, task: TaskType) -> None:
        """A task type (new, or changed by a reload: its learned lengths are kept)."""
        self._tasks[task.name] = task
        self._add_estimates(task)

    # -- what a request carries -------------------------------------------

    def carry(
        self,
        *,
        prompt_bytes: int | None = None,
        prompt_tokens: int | None = None,
        fingerprint: str | None = None,
    ) -> Carried:
        """What a request carries, its prompt's tokens estimated from its bytes unless
        known (a prompt of token ids, or a tokenizer's count)."""
        if prompt_bytes is None and prompt_tokens is None and fingerprint is None:
            return NOTHING
        tokens: float | None = float(prompt_tokens) if prompt_tokens is not None else None
        if tokens is None and prompt_bytes is not None and prompt_bytes > 0:
            tokens = self.prompts.tokens(prompt_bytes)
        return Carried(tokens, prompt_bytes, fingerprint)

    def pick(self, task: str, carried: Carried) -> Dist:
        """The distribution a request of ``task`` that carries ``carried`` follows."""
        cond = self._cond.get(task)
        if cond is None or carried is NOTHING:
            return None
        return cond.pick(carried)

    # -- expectations ------------------------------------------------------

    def estimate(self, task: str, dist: Dist = None) -> LengthEstimate | None:
        """The distribution of a request's length: its task's learned one, or the one
        ``dist`` names; None when lengths are not learned."""
        if dist is not None:
            cond = self._cond.get(task)
            if cond is not None:
                return cond.estimate(dist)
        return self._est.get(task)

    def expected(self, task: TaskType, cap: int | None, floor: int = 0, dist: Dist = None) -> int:
        """Tokens a new request of ``task`` is expected to generate."""
        est = self.estimate(task.name, dist)
        if est is None:
            tokens = (
                task.expected_tokens if cap is None or cap <= 0 else min(cap, task.expected_tokens)
            )
            return max(tokens, floor, 1)
        return max(round(est.mean(cap if cap else None, floor)), 1)

    def remaining(
        self, task: str, produced: int, cap: int | None, tokens: int, dist: Dist = None
    ) -> float:
        """Tokens a running request that has produced ``produced`` still has to make.

        Without learning, the rest of its expected ``tokens``, at least one."""
        est = self.estimate(task, dist)
        if est is None:
            return max(tokens - produced, 1.0)
        return est.remaining(produced, cap)

    @property
    def version(self) -> int:
        """Moves whenever any task's learned lengths change."""
        return sum(e.version for e in self._est.values())

    # -- learning ----------------------------------------------------------

    def observe(
        self, task: str, tokens: int, cap: int | None = None, carried: Carried = NOTHING
    ) -> None:
        """A request of ``task`` that carried ``carried`` generated ``tokens`` (``cap``:
        its max_tokens, at which an answer is cut short)."""
        est = self._est.get(task)
        if est is None or tokens <= 0:
            return
        cond = self._cond.get(task)
        if cond is not None and carried is not NOTHING:
            cond.observe(tokens, cap, carried)
        est.observe(tokens)

    def observe_prompt(self, carried: Carried, prompt_tokens: int | None) -> None:
        """The engine counted ``prompt_tokens`` in a prompt of ``carried.prompt_bytes``."""
        if prompt_tokens and carried.prompt_bytes:
            self.prompts.observe(carried.prompt_bytes, prompt_tokens)

    # -- introspection and state ---------------------------------------------

    def summary(self) -> dict[str, dict[str, Any]]:
        out = {name: est.summary() for name, est in self._est.items()}
        for name, cond in self._cond.items():
            out[name].update(cond.summary())
        return out

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: est.state() for name, est in self._est.items()}
        for name, cond in self._cond.items():
            out[name] = {**out[name], "conditioned": cond.state()}
        return out

    def restore(self, state: Mapping[str, Any]) -> list[str]:
        """Load a saved state; returns the tasks restored (unknown ones are skipped)."""
        done = []
        for name, saved in state.items():
            est = self._est.get(name)
            if est is not None:
                est.restore(saved)
                cond = self._cond.get(name)
                if cond is not None and "conditioned" in saved:
                    cond.restore(saved["conditioned"])
                done.append(name)
        return done
