"""Workloads: task mixes, token-length distributions, arrivals, prompts, traces."""

from saber.workload._arrivals import gamma_arrivals, poisson_arrivals
from saber.workload._lengths import (
    INPUT_CV,
    OUTPUT_CV,
    lognormal_params,
    sample_input_tokens,
    sample_output_tokens,
)
from saber.workload._text import (
    CHAT_TOKENS_PER_MESSAGE,
    TASK_MARKERS,
    count_chat_tokens,
    count_tokens,
    filler,
    guess_task,
    make_prompt,
)
from saber.workload._trace import (
    Mode,
    TraceRequest,
    generate_phased_trace,
    generate_trace,
    read_trace,
    write_trace,
)

__all__ = [
    "CHAT_TOKENS_PER_MESSAGE",
    "INPUT_CV",
    "OUTPUT_CV",
    "TASK_MARKERS",
    "Mode",
    "TraceRequest",
    "count_chat_tokens",
    "count_tokens",
    "filler",
    "gamma_arrivals",
    "generate_phased_trace",
    "generate_trace",
    "guess_task",
    "lognormal_params",
    "make_prompt",
    "poisson_arrivals",
    "read_trace",
    "sample_input_tokens",
    "sample_output_tokens",
    "write_trace",
]
