"""An engine the harness starts does not outlive the test process, even a killed one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from harness import wait_for

# A stand-in engine: answers 200 on every path, /health included, until it is stopped.
SERVER = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok).serve_forever()
    """
)

# The test process: starts the engine through the harness, prints its PID, then waits
# to be killed (SIGKILL: no atexit, no teardown).
RUNNER = textwrap.dedent(
    """
    import sys, time
    from harness import EngineProcess, free_port

    port = free_port()
    engine = EngineProcess(
        "stand-in", [sys.executable, "-c", sys.argv[1], str(port)], port=port, model="m",
        log_path=__import__("pathlib").Path(sys.argv[2]),
    ).start()
    print(engine.pid, flush=True)
    time.sleep(120)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead; it waits for init to reap it.
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}").exists() else ""
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_an_engine_goes_when_the_test_process_is_killed(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(tests)}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, SERVER, str(tmp_path / "engine.log")],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert runner.stdout is not None
        engine_pid = int(runner.stdout.readline())
        assert _alive(engine_pid), "the stand-in engine did not start"
        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
        wait_for(
            lambda: _alive(engine_pid),
            lambda alive: not alive,
            timeout=10,
            describe=lambda: f"engine {engine_pid} gone after its test process was killed",
        )
    finally:
        runner.kill()
        runner.wait(10)
