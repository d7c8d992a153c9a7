"""One HTTP generation request: its engine requests and their tokens.

As in vLLM's V1 engine, every choice is an engine request of its own: ``n`` for
each prompt of the list, so ``vllm:num_requests_running`` counts a request of
``n`` = 4 as 4. Choice ``j`` of prompt ``i`` has index ``i * n + j``.

The driver calls each choice's sink at the end of every step that produced
tokens for it; the sink records vLLM's per-request metrics (these are the
engine's, so they count whether or not the client reads the stream) and queues a
``Delta`` for the route to turn into response text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from saber.engine import EngineRequest
from saber.sim.http.driver import RealTimeDriver
from saber.sim.http.lengths import OutputLengths, Prompt
from saber.sim.http.metrics import SimMetrics
from saber.sim.http.protocol import Generate
from saber.sim.http.responses.errors import ApiError
from saber.sim.http.responses.text import Answer, make_answer
from saber.sim.http.responses.tools import tool_answer


@dataclass
class Choice:
    index: int
    engine_id: str
    prompt: Prompt
    answer: Answer
    generated: int = 0
    first_token_at: float | None = None
    done: bool = False


@dataclass(frozen=True)
class Delta:
    """Tokens ``[start, end)`` of one choice arrived; ``finished`` if that was all."""

    choice: Choice
    start: int
    end: int
    finished: bool
    error: str | None = None

    @property
    def text(self) -> str:
        return self.choice.answer.piece(self.start, self.end)


class Generation:
    """Submits the choices to the engine and yields their deltas in arrival order."""

    def __init__(
        self,
        request_id: str,
        params: Generate,
        *,
        driver: RealTimeDriver,
        lengths: OutputLengths,
        metrics: SimMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = request_id
        self.params = params
        self._driver = driver
        self._metrics = metrics
        self._clock = clock
        self.arrival = clock()
        self.choices: list[Choice] = []
        pairs = zip(params.prompts, params.max_tokens, strict=True)
        for i, (prompt, cap) in enumerate(pairs):
            for j in range(params.n):
                if params.tool is not None:  # as long as its arguments, whatever else
                    answer = tool_answer(params.tool, cap)
                else:
                    tokens, ended = lengths.output_tokens(
                        prompt.text,
                        max_tokens=cap,
                        ignore_eos=params.ignore_eos,
                        min_tokens=params.min_tokens,
                        choice=j,
                    )
                    answer = make_answer(
                        tokens,
                        ended=ended,
                        stop=params.stop,
                        min_tokens=params.min_tokens,
                        include_stop=params.include_stop,
                    )
                index = i * params.n + j
                self.choices.append(Choice(index, f"{request_id}-{index}", prompt, answer))
        self._queue: asyncio.Queue[Delta] = asyncio.Queue()
        self._open = 0

    def start(self) -> None:
        """Hand every choice to the engine; ApiError if the engine cannot hold one."""
        for choice in self.choices:
            req = EngineRequest(
                id=choice.engine_id,
                prompt_tokens=choice.prompt.tokens,
                output_tokens=choice.answer.tokens,
                priority=self.params.priority,
            )
            try:
                self._driver.submit(req, self._sink(choice))
            except ValueError as exc:
                self.close()
                raise ApiError(str(exc)) from None
            self._open += 1

    def close(self) -> None:
        """Abort what is still running (the client left); safe to call again."""
        for choice in self.choices:
            if not choice.done:
                choice.done = True
                self._driver.abort(choice.engine_id)

    async def deltas(self) -> AsyncIterator[Delta]:
        while self._open:
            delta = await self._queue.get()
            if delta.finished:
                self._open -= 1
            yield delta
            if delta.error:
                return

    @property
    def prompt_tokens(self) -> int:
        """Each prompt once, however many choices it has (vLLM's usage)."""
        return sum(p.tokens for p in self.params.prompts)

    @property
    def completion_tokens(self) -> int:
        return sum(c.generated for c in self.choices)

    def _sink(self, choice: Choice) -> Callable[[int, bool, str | None], None]:
        def sink(n: int, finished: bool, error: str | None) -> None:
            now = self._clock()
            start = choice.generated
            choice.generated += n
            self._metrics.generation_tokens.inc(n)
            if choice.first_token_at is None and n:
                choice.first_token_at = now
                self._metrics.first_token(choice.prompt.tokens, now - self.arrival)
            if finished:
                choice.done = True
                if error is None:
                    self._metrics.finished(
                        choice.answer.finish_reason,
                        now - self.arrival,
                        choice.generated,
                        now - (choice.first_token_at or now),
                    )
            self._queue.put_nowait(Delta(choice, start, choice.generated, finished, error))

        return sink
