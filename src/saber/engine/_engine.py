"""A vLLM-V1-like continuous-batching engine, stepped explicitly by its caller.

No clock and no asyncio: the caller passes ``now`` and gets back what the steps
did and when they ended. The virtual-time simulator and the HTTP stand-in step
the same object; only the clock differs.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Literal

from saber.engine._preset import BLOCK_SIZE, EnginePreset
from saber.engine._request import EngineRequest, StepResult


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE)


def _rank(req: EngineRequest) -> tuple[int, float]:
    """vLLM's order under the priority policy: lower priority value, then earlier arrival."""
    return req.priority, req.arrival


SchedulingPolicy = Literal["fcfs", "priority"]


class Engine:
    """Continuous batching with chunked prefill, a paged KV cache and recompute
    preemption, scheduled as vLLM V1 does:

    each step serves running requests first, in admission order (a decode costs one
    token of the step's budget; a partly prefilled request takes what is left of
    its prefill, up to the budget), then admits waiting requests first come first
    served while the budget, the ``max_num_seqs`` seats and the KV cache allow.
    When a running request needs a KV block and none is free, the most recently
    admitted running request is preempted: its blocks are freed, it goes back to
    the front of the waiting queue, and when readmitted it prefills its prompt and
    everything it had generated again. A step that completes a prefill samples that
    request's next token (its first, unless it was preempted).

    ``scheduling_policy="priority"`` is vLLM's ``--scheduling-policy priority``: the
    waiting queue is kept in (priority, arrival) order, a preempted request rejoins
    it in that order, and the victim is the running request last in that order,
    wherever it sits in the batch (if this step already scheduled it, its share of
    the step is given back). Under ``"fcfs"`` priorities are ignored.
    """

    def __init__(
        self,
        preset: EnginePreset,
        *,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
        kv_capacity_tokens: int | None = None,
        scheduling_policy: SchedulingPolicy = "fcfs",
    ) -> None:
        if scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(
                f"scheduling_policy must be 'fcfs' or 'priority', not {scheduling_policy!r}"
            )
        if max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if max_num_batched_tokens < max_num_seqs:
            # vLLM refuses this too: every running request must fit one decode token.
            raise ValueError("max_num_batched_tokens must be >= max_num_seqs")
        capacity = preset.kv_capacity_tokens if kv_capacity_tokens is None else kv_capacity_tokens
        if capacity < BLOCK_SIZE:
            raise ValueError(f"a KV cache of {capacity} tokens holds no {BLOCK_SIZE}-token block")
        self.preset = preset
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.scheduling_policy: SchedulingPolicy = scheduling_policy
        self._by_priority = scheduling_policy == "priority"
        self.num_blocks = capacity // BLOCK_SIZE
        self._free = self.num_blocks
        self._running: list[EngineRequest] = []  # in admission order
        self._waiting: deque[EngineRequest] = deque()
        self._known: dict[str, EngineRequest] = {}
        self._clock = -math.inf  # end of the last step
        self.total_steps = 0
        self.total_preemptions = 0
        self.max_running = 0

    # -- state -----------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting

    @property
    def kv_usage(self) -> float:
        """Share of KV-cache blocks in use, 0..1."""
        return 1.0 - self._free / self.num_blocks

    @property
    def running_ids(self) -> list[str]:
        return [r.id for r in self._running]

    @property
    def waiting_ids(self) -> list[str]:
        return [r.id for r in self._waiting]

    @property
    def clock(self) -> float:
        """When the last step ended (-inf before the first)."""
        return self._clock

    def get(self, req_id: str) -> EngineRequest | None:
        """A waiting or running request by id."""
        return self._known.get(req_id)

    # -- requests --------------------------------------------------------

    def add(self, req: EngineRequest) -> None:
        """Queue a request; it joins the batch at the next step boundary.

        Raises ValueError for a duplicate id, or a request whose full context could
        never fit the KV cache (vLLM rejects those up front too).
        """
        if req.id in self._known:
            raise ValueError(f"request {req.id} is already in the engine")
        if req.generated or req.computed or req.finished_at is not None:
            raise ValueError(f"request {req.id} has already run")
        if _blocks(req.prompt_tokens + req.output_tokens) > self.num_blocks:
            raise ValueError(
                f"request {req.id}: {req.prompt_tokens + req.output_tokens} tokens of context "
                f"exceed the KV cache ({self.num_blocks * BLOCK_SIZE} tokens)"
            )
        self._known[req.id] = req
        if self._by_priority:
            bisect.insort_right(self._waiting, req, key=_rank)
        else:
            self._waiting.append(req)

    def abort(self, req_id: str) -> bool:
        """Drop a waiting or running request and free its KV cache (the client left).
        Returns False if the engine does not hold it."""
        req = self._known.pop(req_id, None)
        if req is None:
            return False
        if req.blocks:
            self._running.remove(req)
        else:
            self._waiting.remove(req)
        self._release(req)
        return True

    # -- stepping --------------------------------------------------------

    def step(
        self, now: float, *, max_steps: int = 1, until: float | None = None
    ) -> StepResult | None:
        """Run steps back to back from ``now`` (or from the end of the last step, if
        later). Returns None when there is nothing to run.

        The first step always runs. Further steps run only while the batch cannot
        change: the call stops after a step in which a request finished, a prefill
        chunk ran or a request was preempted, after ``max_steps`` steps, and before
        starting a step at or after ``until`` (the next time the caller has news,
        such as an arrival). Consecutive pure-decode steps cost O(1) each.
        """
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if self.idle:
            return None
        start = now if now > self._clock else self._clock
        result = StepResult(start=start, end=start, steps=0)
        end, quiet = self._schedule_step(start, result)
        steps = 1
        if quiet and max_steps > 1 and (until is None or end < until):
            end, k = self._decode_run(end, max_steps - 1, until, result)
            steps += k
        result.end = end
        result.steps = steps
        self._clock = end
        self.total_steps += steps
        return result

    def _schedule_step(self, start: float, result: StepResult) -> tuple[float, bool]:
        """One step through the full scheduler. Returns its end and whether it was a
        pure-decode step of every running request (so the next can take the fast path)."""
        running = self._running
        budget = self.max_num_batched_tokens
        batch: list[tuple[EngineRequest, int]] = []
        tokens = context = pairs = 0  # what the step computes, for its duration
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.computed
            new = req.prompt_tokens + req.generated - computed
            if new > budget:
                new = budget
            need = -(-(computed + new) // BLOCK_SIZE) - req.blocks
            while need > self._free:
                if self._by_priority:
                    victim = max(running, key=_rank)
                    at = running.index(victim)
                    del running[at]
                    if at < i:  # scheduled earlier in this step: un-schedule it
                        # batch[at] is its entry; its computed count changes only
                        # after the loop, so what the entry added can be taken back.
                        _, given = batch.pop(at)
                        was = victim.computed
                        budget += given
                        tokens -= given
                        context -= was + given
                        pairs -= given * was + given * (given + 1) // 2
                        i -= 1
                else:
                    victim = running.pop()
                self._preempt(victim, result)
                preempted = True
                if victim is req:
                    break
            else:
                self._free -= need
                req.blocks += need
                batch.append((req, new))
                budget -= new
                tokens += new
                context += computed + new
                pairs += new * computed + new * (new + 1) // 2
                i += 1
                continue
            break  # the request itself was preempted
        if not preempted:
            waiting = self._waiting
            while waiting and budget > 0 and len(running) < self.max_num_seqs:
                req = waiting[0]
                new = min(req.prompt_tokens + req.generated, budget)
                need = -(-new // BLOCK_SIZE)
                if need > self._free:
                    break
                waiting.popleft()
                running.append(req)
                self._free -= need
                req.blocks = need
                batch.append((req, new))
                budget -= new
                tokens += new
                context += new
                pairs += new * (new + 1) // 2
        if len(running) > self.max_running:
            self.max_running = len(running)
        assert batch, "a non-idle engine always schedules something"
        end = start + self.preset.step_time(
            num_seqs=len(batch), tokens=tokens, context_tokens=context, attn_pairs=pairs
        )

        prefill = finished = False
        emitted = result.tokens
        for req, new in batch:
            if req.started_at is None:
                req.started_at = start
            target = req.prompt_tokens + req.generated
            if new != 1 or req.generated == 0 or target - req.computed != 1:
                prefill = True
            req.computed += new
            if req.computed == target:  # the last computed token samples the next
                req.generated += 1
                emitted[req.id] = emitted.get(req.id, 0) + 1
                if req.first_token_at is None:
                    req.first_token_at = end
                    result.first_tokens[req.id] = end
                if req.generated == req.output_tokens:
                    finished = True
        if finished:
            self._reap(end, result)
        quiet = not (prefill or preempted or finished) and len(batch) == len(running)
        return end, quiet

    def _decode_run(
        self, t: float, max_steps: int, until: float | None, result: StepResult
    ) -> tuple[float, int]:
        """Up to ``max_steps`` pure-decode steps of the whole running batch from ``t``.

        Every request gains one context token per step, so the batch's context sum
        grows by ``n`` a step and the requests needing a new KV block at step ``k``
        are those whose context is ``-k mod BLOCK_SIZE`` now: the loop is arithmetic
        only, and each request is updated once at the end.
        """
        running = self._running
        n = len(running)
        context = 0
        remaining = math.inf
        phase = [0] * BLOCK_SIZE
        for req in running:
            context += req.computed
            phase[req.computed % BLOCK_SIZE] += 1
            left = req.output_tokens - req.generated
            if left < remaining:
                remaining = left
        limit = min(max_steps, remaining)
        free = self._free
        step_time = self.preset.step_time
        k = 0
        while k < limit:
            if until is not None and t >= until:
                break
            need = phase[-k % BLOCK_SIZE]
            if need > free:
                break  # the next step preempts: leave it to the full scheduler
            free -= need
            k += 1
            ctx = context + k * n
            t += step_time(num_seqs=n, tokens=n, context_tokens=ctx, attn_pairs=ctx)
        if k == 0:
            return t, 0
        self._free = free
        finished = False
        tokens = result.tokens
        for req in running:
            req.computed += k
            req.generated += k
            req.blocks = _blocks(req.computed)
            tokens[req.id] = tokens.get(req.id, 0) + k
            if req.generated == req.output_tokens:
                finished = True
        if finished:
            self._reap(t, result)
        return t, k

    # -- bookkeeping -----------------------------------------------------

    def _reap(self, end: float, result: StepResult) -> None:
        keep = []
        for req in self._running:
            if req.generated == req.output_tokens:
                req.finished_at = end
                self._release(req)
                del self._known[req.id]
                result.finished.append(req)
            else:
                keep.append(req)
        self._running[:] = keep

    def _preempt(self, req: EngineRequest, result: StepResult) -> None:
        self._release(req)
        req.preemptions += 1
        self.total_preemptions += 1
        if self._by_priority:
            bisect.insort_right(self._waiting, req, key=_rank)
        else:
            self._waiting.appendleft(req)
        result.preempted.append(req.id)

    def _release(self, req: EngineRequest) -> None:
        self._free += req.blocks
        req.blocks = 0
        req.computed = 0
