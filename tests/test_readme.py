"""The README as a newcomer follows it (issue 48): short, its test command the one
``.ci/run`` runs, and "Put it in front of your vLLM" run as written, saber-sim standing
in for vLLM: a quick profile, then the gateway serving with it.

The block runs in bash from the repository's root with three changes: free ports for
8000 and 8080 (other tests, or anyone's servers, may hold those), and the profile and
the gateway's log under the test's own folder instead of ``profiles/`` and ``/tmp``.
It takes as long as the quick profile (about 2.5 minutes) and is bounded: the block by
``BLOCK_TIMEOUT_S``, everything it started killed with its process group at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import openai
import pytest

from harness import free_port
from saber.speed import load_profile

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SECTION = "## Put it in front of your vLLM"
BLOCK_TIMEOUT_S = 300


def _bash_blocks(section: str) -> list[str]:
    """The ```bash blocks of one README section, in order."""
    text = README.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    body = text[start : end if end != -1 else len(text)]
    return re.findall(r"```bash\n(.*?)```", body, re.DOTALL)


def test_the_readme_is_for_the_people_who_run_it() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200
    (setup,) = _bash_blocks("## Set-up on a fresh machine")
    install, tests = setup.strip().splitlines()
    assert install.endswith(".venv/bin/python -m saber.demo")
    # The second set-up command is what CI runs, word for word.
    assert tests in (REPO / ".ci" / "run").read_text().replace(" \\\n  ", " ")


@pytest.mark.slow
def test_put_it_in_front_of_your_vllm_as_written(tmp_path: Path) -> None:
    (block,) = _bash_blocks(SECTION)
    sim_port, gateway_port = free_port(), free_port()
    profile, log = tmp_path / "qwen-coder.json", tmp_path / "saber-gateway.log"
    script = (
        block.replace(":8000", f":{sim_port}")
        .replace("--port 8000", f"--port {sim_port}")
        .replace(":8080", f":{gateway_port}")
        .replace("--port 8080", f"--port {gateway_port}")
        .replace("profiles/qwen-coder.json", str(profile))
        .replace("/tmp/saber-gateway.log", str(log))
    )
    assert "8000" not in script and "8080" not in script
    pids = tmp_path / "pids"
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SABER_")}
    with out.open("w") as stdout, err.open("w") as stderr:
        shell = subprocess.Popen(
            ["bash", "-c", f'{script}\necho "$SIM $GATEWAY" > {pids}\n'],
            cwd=REPO,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # one process group: everything it starts ends with it
            env=env,
        )
        try:
            assert shell.wait(timeout=BLOCK_TIMEOUT_S) == 0, err.read_text()[-3000:]
            for pid in (int(p) for p in pids.read_text().split()):
                os.kill(pid, 0)  # saber-sim and the gateway still run in the background
            _check(profile, log, out.read_text(), err.read_text(), gateway_port)
        finally:
            _stop(shell)


def _stop(shell: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the block's process group (the gateway drains), then SIGKILL to what is
    left after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(shell.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(shell.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.killpg(shell.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        shell.wait(timeout=5)


def _check(profile: Path, log: Path, stdout: str, stderr: str, gateway_port: int) -> None:
    # The quick profile: written, of saber-sim, its duration said before it started.
    fitted = load_profile(profile)
    assert fitted.backend.kind == "sim" and fitted.profiling is not None
    assert "quick run: 7 visits, 8 s at load 1" in stderr and "profiled in" in stderr
    assert profile.with_suffix(".png").exists()
    # The status the README prints: the new profile in use, and admission's state.
    status = json.loads(stdout[stdout.index('{\n "profile"') :])
    assert status["profile"]["path"] == str(profile) and status["profile"]["default"] is False
    assert status["profile"]["params"] == fitted.params
    assert {"load", "queues", "recent_decisions", "predicted_speed_tokens_per_s"} <= set(status)
    # The gateway serves with it, and started without a warning.
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key="x", max_retries=0
    )
    answer = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert answer.headers["x-saber-outcome"] == "admitted"
    assert answer.parse().choices[0].message.content
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(r["msg"] == "saber-gateway ready" for r in records)
    assert not [r for r in records if r["level"] in ("warning", "error")]
