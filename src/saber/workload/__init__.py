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
from saber.workload._trace_formats import (
    AZURE_CODE_TRACE,
    NO_CAP,
    UNNAMED_TASK,
    TraceFormatError,
    load_trace,
    trace_format,
)

__all__ = [
    "AZURE_CODE_TRACE",
    "CHAT_TOKENS_PER_MESSAGE",
    "INPUT_CV",
    "JOINT_TASKS",
    "NO_CAP",
    "OUTPUT_CV",
    "SIM_BYTES_PER_TOKEN",
    "TASK_MARKERS",
    "UNNAMED_TASK",
    "Lengths",
    "Mode",
    "TraceFormatError",
    "TraceRequest",
    "count_chat_tokens",
    "count_tokens",
    "filler",
    "gamma_arrivals",
    "generate_phased_trace",
    "generate_trace",
    "guess_task",
    "joint_outputs",
    "load_trace",
    "lognormal_params",
    "make_prompt",
    "poisson_arrivals",
    "read_trace",
    "sample_input_tokens",
    "sample_output_tokens",
    "trace_format",
    "translation_ratios",
    "write_trace",
]
