"""A request inside the engine, and what a call to ``Engine.step`` reports."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class EngineRequest:
    """One generation: ``prompt_tokens`` in, exactly ``output_tokens`` out.

    The engine updates the mutable fields as steps run; times are the end of the
    step that produced the event, in the caller's clock. ``priority`` is vLLM's:
    lower is served first, and only an engine with ``scheduling_policy="priority"``
    looks at it.
    """

    id: str
    prompt_tokens: int
    output_tokens: int
    arrival: float = 0.0
    priority: int = 0
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None
    preemptions: int = 0
    started_at: float | None = None  # start of the first step that computed it
    # Tokens whose KV is computed and held; recompute preemption resets it to 0.
    computed: int = field(default=0, repr=False)
    blocks: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.id}: prompt and output tokens must be >= 1")

    @property
    def num_tokens(self) -> int:
        """Prompt plus everything sampled so far."""
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.generated >= self.output_tokens


@dataclass
class StepResult:
    """What one call to ``Engine.step`` did: ``steps`` back-to-back steps over
    ``[start, end]``. ``tokens`` counts new tokens per request id; the first token
    of a request and its finish happen at the end of the step that produced them."""

    start: float
    end: float
    steps: int
    tokens: dict[str, int] = field(default_factory=dict)
    first_tokens: dict[str, float] = field(default_factory=dict)
    finished: list[EngineRequest] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
