"""The test harness: real inference engines on a CPU-only machine, and small helpers.

Not part of the saber package (the wheel leaves ``tests/`` out): pytest puts ``tests/``
on the path (``pythonpath`` in pyproject.toml), and scripts under ``bench/`` put it
there themselves.

``ensure_*`` build what is missing into the cache (``cache_dir()``) and return at once
when it is there; ``start_vllm`` / ``start_llamacpp`` start an engine on a free
127.0.0.1 port and return its running ``EngineProcess``.
``PYTHONPATH=tests python -m harness prepare`` warms the cache; ``start_gateway`` puts
a saber-gateway process in front of an engine; ``real_loop`` profiles an engine and
replays a stream with and without a gateway; ``bench_script`` loads a script of
``bench/`` as a module. ``config_with_slos`` and its neighbours put the SLOs
saber-profile suggests (``--suggest-slos``) to use in a gateway. See docs/real-backends.md.
"""

from harness._bench import bench_script
from harness._cache import cache_dir
from harness._gateway import (
    GENEROUS,
    EngineGateway,
    gateway_process,
    start_gateway,
    write_profile,
)
from harness._gguf import ensure_gguf_model
from harness._llamacpp import ensure_llama_server, start_llamacpp
from harness._loop import TIMEOUT_S as REAL_LOOP_TIMEOUT_S
from harness._loop import LoopReport, real_loop
from harness._metrics import metric_value, scrape
from harness._process import EngineProcess, EngineStartError, free_port
from harness._serve import held_request, serve_app, wait_for, wait_until
from harness._slos import (
    assert_counted_by_part,
    config_with_slos,
    counted_by_part,
    read_suggestions,
    serve_each_task,
    two_task_dataset,
)
from harness._vllm import ensure_hf_model, ensure_vllm_env, start_vllm

__all__ = [
    "GENEROUS",
    "REAL_LOOP_TIMEOUT_S",
    "EngineGateway",
    "EngineProcess",
    "EngineStartError",
    "LoopReport",
    "assert_counted_by_part",
    "bench_script",
    "cache_dir",
    "config_with_slos",
    "counted_by_part",
    "ensure_gguf_model",
    "ensure_hf_model",
    "ensure_llama_server",
    "ensure_vllm_env",
    "free_port",
    "gateway_process",
    "held_request",
    "metric_value",
    "read_suggestions",
    "real_loop",
    "scrape",
    "serve_app",
    "serve_each_task",
    "start_gateway",
    "start_llamacpp",
    "start_vllm",
    "two_task_dataset",
    "wait_for",
    "wait_until",
    "write_profile",
]
