"""Real inference engines for tests and benchmarks, on a CPU-only machine.

``ensure_*`` build what is missing into the cache (``cache_dir()``) and return at once
when it is there; ``start_vllm`` / ``start_llamacpp`` start an engine on a free
127.0.0.1 port and return its running ``EngineProcess``. ``python -m saber.testing
prepare`` warms the cache; ``start_gateway`` puts a saber-gateway process in front of
an engine. See docs/real-backends.md.
"""

from saber.testing._cache import cache_dir
from saber.testing._gateway import GENEROUS, EngineGateway, start_gateway, write_profile
from saber.testing._gguf import ensure_gguf_model
from saber.testing._llamacpp import ensure_llama_server, start_llamacpp
from saber.testing._loop import LoopReport, real_loop
from saber.testing._metrics import metric_value, scrape
from saber.testing._process import EngineProcess, EngineStartError, free_port
from saber.testing._serve import serve_app, wait_until
from saber.testing._vllm import ensure_hf_model, ensure_vllm_env, start_vllm

__all__ = [
    "GENEROUS",
    "EngineGateway",
    "EngineProcess",
    "EngineStartError",
    "LoopReport",
    "cache_dir",
    "ensure_gguf_model",
    "ensure_hf_model",
    "ensure_llama_server",
    "ensure_vllm_env",
    "free_port",
    "metric_value",
    "real_loop",
    "scrape",
    "serve_app",
    "start_gateway",
    "start_llamacpp",
    "start_vllm",
    "wait_until",
    "write_profile",
]
