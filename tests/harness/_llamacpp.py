"""llama.cpp's ``llama-server`` built from source, and starting it.

PyPI has no llama-server binary, but the sdist of llama-cpp-python carries the whole
llama.cpp tree under ``vendor/llama.cpp``; we build only the server target from it
(about 4.5 minutes on 2 cores, once per version).
"""

from __future__ import annotations

import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

from harness._cache import cache_dir, is_ready, locked, log, mark_ready, run
from harness._gguf import LAYERS, ensure_gguf_model
from harness._process import EngineProcess, free_port

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the build downloads its web UI
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=OFF",  # a cached binary must run on the next CI machine too
]


def llamacpp_root() -> Path:
    return cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def ensure_llama_server(jobs: int = 2) -> Path:
    """Path of a ``llama-server`` binary built from llama-cpp-python's sdist (cached)."""
    root = llamacpp_root()
    binary = root / "build" / "bin" / "llama-server"
    if is_ready(root) and binary.is_file():
        return binary
    with locked(root):
        if is_ready(root) and binary.is_file():
            return binary
        started = time.monotonic()
        build_log = root / "build.log"
        log(f"building llama-server from llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} in {root}")
        log(f"(about 5 minutes on 2 cores; log: {build_log})")
        source = _unpacked_source(root, build_log)
        run(["cmake", "-S", source, "-B", root / "build", *CMAKE_FLAGS], log_file=build_log)
        run(
            ["cmake", "--build", root / "build", f"-j{jobs}", "--target", "llama-server"],
            log_file=build_log,
        )
        run([binary, "--version"], log_file=build_log)
        mark_ready(root, f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}")
        log(f"llama-server ready in {time.monotonic() - started:.0f} s")
    return binary


def _unpacked_source(root: Path, build_log: Path) -> Path:
    """The llama.cpp tree from the sdist: downloaded once, unpacked once."""
    name = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    source = root / "src" / name / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    sdist = root / "sdist" / f"{name}.tar.gz"
    if not sdist.is_file():
        download: list[str | os.PathLike[str]] = [
            sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
            "--no-binary", ":all:", "--no-deps", "--dest", root / "sdist",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        ]  # fmt: skip
        run(download, log_file=build_log)
    shutil.rmtree(root / "src", ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "src", filter="data")
    return source


def start_llamacpp(
    model: str = "tiny-llama",
    parallel: int = 32,
    ctx: int = 16384,
    *,
    seed: int = 0,
    threads: int = 1,
    startup_timeout_s: float = 60.0,
    nice: int = -10,
    cpus: str | None = None,
    layers: int = LAYERS,
    port: int | None = None,
) -> EngineProcess:
    """Prepare (if needed) and start llama-server on a free 127.0.0.1 port.

    ``parallel`` slots share one ``ctx``-token KV cache (``--kv-unified``); requests past
    the slots wait in llama-server's queue (``llamacpp:requests_deferred``).

    One thread at a raised priority by default: the tests measure its speed on a
    2-core machine they share with their own process and with other work. Two threads
    wait on each other at every step, so anything else taking a core for a moment
    stalls the whole batch (speeds fell 2-20 fold while another process ran); one
    thread, ranked above the rest of the machine (``nice``), keeps a core to itself
    and leaves the other to the tests and everything else.

    ``layers`` above the default: a slower engine of the same model name; ``port``: the
    port of an engine stopped before, to restart it in its place.
    """
    binary = ensure_llama_server()
    gguf_file = ensure_gguf_model(seed, layers)
    port = port or free_port()
    argv = [
        str(binary),
        "-m", str(gguf_file),
        "--alias", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "-np", str(parallel),
        "-c", str(ctx),
        "--kv-unified",
        "-t", str(threads),
        "--metrics",
        "--no-webui",
    ]  # fmt: skip
    engine = EngineProcess(
        "llamacpp",
        argv,
        port=port,
        model=model,
        startup_timeout_s=startup_timeout_s,
        nice=nice,
        cpus=cpus,
    )
    return engine.start()
