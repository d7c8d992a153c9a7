"""Workloads: task mixes, token-length distributions, arrivals, prompts, traces."""

from saber.workload._arrivals import gamma_arrivals, poisson_arrivals
from saber.workload._joint import JOINT_TASKS, joint_outputs, translation_ratios
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
    SIM_BYTES_PER_TOKEN,
    Lengths,
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
    "JOINT_TASKS",
    "OUTPUT_CV",
    "SIM_BYTES_PER_TOKEN",
    "TASK_MARKERS",
    "Lengths",
    "Mode",
    "TraceRequest",
    "count_chat_tokens",
    "count_tokens",
    "filler",
    "gamma_arrivals",
    "generate_phased_trace",
    "generate_trace",
    "guess_task",
    "joint_outputs",
    "lognormal_params",
    "make_prompt",
    "poisson_arrivals",
    "read_trace",
    "sample_input_tokens",
    "sample_output_tokens",
    "translation_ratios",
    "write_trace",
]
