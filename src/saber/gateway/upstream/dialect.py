"""Where the engines read a request, or write an answer, differently.

Everything else on the wire is the same OpenAI API, so the relay is one code
path; these flags are the exceptions, checked against vLLM 0.32 and llama.cpp's
llama-server (the source vendored by llama-cpp-python 0.3.36):

- ``min_tokens``: vLLM generates at least that many tokens, so the scheduler's
  estimate is raised to it; llama.cpp ignores the field.
- ``n_predict``: llama.cpp's own name for the cap, which wins over ``max_tokens``
  and ``max_completion_tokens`` when present; ``-1`` in any of them means no
  cap. vLLM ignores ``n_predict`` and refuses a negative ``max_tokens``.
- usage in streams: with ``stream_options.include_usage`` (which the gateway
  always asks for), vLLM sends a separate chunk with empty ``choices``. llama.cpp
  does the same for chat, but on ``/v1/completions`` it puts ``usage`` on the
  finishing chunk, asked or not. So for llama.cpp that usage is left where it is
  (the client would have had it without the gateway); for vLLM it is usage the
  gateway added, taken out again unless the client asked for it.
- ``priority``: vLLM's request priority (lower is served first, under
  ``--scheduling-policy priority``; ignored under fcfs). llama.cpp has none.
"""

from __future__ import annotations

from dataclasses import dataclass

from saber.backend import BackendKind


@dataclass(frozen=True, slots=True)
class Dialect:
    kind: BackendKind
    honours_min_tokens: bool
    reads_n_predict: bool
    usage_on_final_choice: bool
    """The engine itself puts usage on chunks that carry choices: leave it there."""
    reads_priority: bool


DIALECTS: dict[BackendKind, Dialect] = {
    BackendKind.VLLM: Dialect(BackendKind.VLLM, True, False, False, True),
    BackendKind.SIM: Dialect(BackendKind.SIM, True, False, False, True),
    BackendKind.LLAMACPP: Dialect(BackendKind.LLAMACPP, False, True, True, False),
}
VLLM = DIALECTS[BackendKind.VLLM]
