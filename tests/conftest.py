"""Session-wide real engines (llama.cpp, vLLM) and saber-gateways in front of them.

Nothing here starts unless a test asks for it: the default suite deselects the
``vllm`` and ``llamacpp`` tiers. The first request of a session builds whatever the
cache lacks (``PYTHONPATH=tests python -m harness prepare`` does it ahead of time).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import (
    EngineGateway,
    EngineProcess,
    start_gateway,
    start_llamacpp,
    start_vllm,
    write_profile,
)

# On 2 cores, vLLM generating at full speed keeps both busy (its engine core, worker and
# API server), and this VM then stalls every process, timers and all, for tens of
# seconds at a time: the tests would measure the stalls. Confined to CPU 0, it leaves
# the gateway and the tests a core and the machine responsive (measured: /metrics answers
# in 5-10 ms instead of not at all for 30 s). It ran "at nice 5" too, which never took
# effect (nice(1) ranks a process only within its session, and the engine has its own)
# and is not asked for now that EngineProcess sets nice on the session: the tier was
# measured without it. llama.cpp runs one thread at a raised priority
# (harness.start_llamacpp): the profiling tests measure its speed, which must not depend
# on what else the machine runs.
VLLM_CPUS = "0"
# A hung engine fails a test in two minutes rather than the shipped ten; a busy 2-core
# machine may take more than the shipped 2 s to accept a connection, and more than the
# 1 s that the shipped 1 s interval allows a read of the engine's /metrics (vLLM's, while
# it streams at full speed): a read every 5 s, each allowed 5 s.
REAL_GATEWAY_OVERRIDES = {
    "backend.read_timeout_s": 120.0,
    "backend.connect_timeout_s": 30.0,
    "backend.metrics_interval_s": 5.0,
}


@pytest.fixture(scope="session")
def real_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profile generous enough that the gateway admits all a real-engine test sends."""
    return write_profile(tmp_path_factory.mktemp("real-profile") / "generous.json")


@pytest.fixture(scope="session")
def llamacpp_engine() -> Iterator[EngineProcess]:
    engine = start_llamacpp()
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def vllm_engine() -> Iterator[EngineProcess]:
    # The tiny model's whole 16,384 positions: requests long enough (half a minute on
    # 2 cores) to be caught running when a test disconnects or kills the engine.
    # Developer mode, so that /server_info says the scheduling policy (fcfs, vLLM's
    # default) to the gateway's forward_priority: auto (test_vllm_priority.py); it only
    # adds routes, and logs the stack of each error.
    engine = start_vllm(max_model_len=16384, cpus=VLLM_CPUS, dev_mode=True)
    yield engine
    engine.stop()


# The real tiers' long requests (LONG in tests/real/test_vllm.py and test_llamacpp.py)
# are the default task's, code_generation, whose shipped cap is 1,024 tokens: clamped,
# they ran 5 to 10 s instead of a minute and sometimes ended before a test caught them
# running (the gateway's copy of the engine's count, read every 5 s, never read 1: vLLM's
# in stop 51 and 52's CI, llama.cpp's in stop 53's; two of vLLM's, which then also had
# to make 128 tokens/s each, were run one after the other once the gateway had learned
# the engine's speed: in-flight never read 2). The caps are tested in the default suite.
LONG_GATEWAY_OVERRIDES = {**REAL_GATEWAY_OVERRIDES, "task_max_tokens": "off"}


@pytest.fixture(scope="session")
def llamacpp_gateway(llamacpp_engine: EngineProcess, real_profile: Path) -> Iterator[EngineGateway]:
    gw = start_gateway(llamacpp_engine, real_profile, **LONG_GATEWAY_OVERRIDES)
    yield gw
    gw.stop()


@pytest.fixture(scope="session")
def vllm_gateway(vllm_engine: EngineProcess, real_profile: Path) -> Iterator[EngineGateway]:
    gw = start_gateway(vllm_engine, real_profile, **LONG_GATEWAY_OVERRIDES)
    yield gw
    gw.stop()
