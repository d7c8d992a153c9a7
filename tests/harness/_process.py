"""One engine server process: started, health-checked, stopped by its PID.

The engine runs in its own session (process group), so that stopping it also
reaches the workers it forks (vLLM's engine core), and nothing outlives the tests:
not an interrupted run (atexit), and not a killed one either (the kernel sends the
engine SIGTERM when the test process dies, however it dies).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from harness._cache import cache_dir, tail

_LIVE: weakref.WeakSet[EngineProcess] = weakref.WeakSet()
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the forked child only calls it
_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EngineStartError(RuntimeError):
    """The engine exited or did not answer ``/health`` in time; the message has its log."""


class EngineProcess:
    """A real inference server on 127.0.0.1, OpenAI API at ``base_url + "/v1"`` (also used
    for saber-gateway's own process, kind ``"gateway"``).

    ``start()`` returns once ``/health`` answers 200; ``stop()`` sends SIGTERM to the
    engine, then SIGKILL to its process group after ``grace_s``; ``restart()`` keeps the
    port, so a gateway pointed at it needs no change. Output goes to ``log_path``. A
    positive ``nice`` lowers the engine's CPU priority, a negative one (root only; ignored
    otherwise) raises it; ``cpus`` (taskset's list, "0") confines it and every process it
    starts to those CPUs.

    The engine runs in a session of its own, and Linux (with autogroups, the default)
    shares the CPU between sessions first: a process's own nice then only ranks it
    within its session. So ``nice`` is also set on the engine's session
    (``/proc/PID/autogroup``), which is what ranks it against everything else running.
    """

    def __init__(
        self,
        kind: str,
        argv: Sequence[str],
        *,
        port: int,
        model: str,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 60.0,
        log_path: Path | None = None,
        nice: int = 0,
        cpus: str | None = None,
    ) -> None:
        self.kind = kind
        self.port = port
        self.model = model
        self.base_url = f"http://127.0.0.1:{port}"
        # ``nice`` and ``taskset`` exec the engine in their place: the PID stays the engine's,
        # and the processes it starts inherit both.
        prefix = ["nice", "-n", str(nice)] if nice else []
        prefix += ["taskset", "-c", cpus] if cpus else []
        self.argv = [*prefix, *argv]
        self.env = dict(os.environ if env is None else env)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path or cache_dir() / "logs" / f"{kind}-{os.getpid()}-{port}.log"
        self.nice = nice
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EngineProcess:
        """Spawn the server and wait for a 200 from ``/health``; raise EngineStartError."""
        if self.running:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        _LIVE.add(self)
        if self.nice:
            _set_session_nice(self._proc.pid, self.nice)
        deadline = started + self.startup_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    self._proc = None
                    raise EngineStartError(self._failure(f"exited with status {code}"))
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.base_url + "/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    self.stop(grace_s=5.0)
                    raise EngineStartError(
                        self._failure(f"no 200 from /health within {self.startup_timeout_s:.0f} s")
                    )
                time.sleep(0.25)
        return self

    def stop(self, grace_s: float = 15.0) -> None:
        """Terminate the engine (SIGTERM to its PID), SIGKILL its group after ``grace_s``;
        ``grace_s=0`` kills at once, as a crash would."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the engine leads its own process group
        shm = _shared_memory(pgid)
        if proc.poll() is None:
            if grace_s > 0:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(grace_s)
            if proc.poll() is None:
                _kill_group(pgid)
            # SIGKILL cannot be refused, but a process stuck in the kernel (a page fault on
            # a thrashing machine) dies when it comes back: waiting longer beats raising.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30.0)
        # Workers the engine forked go with it (and Python's resource tracker, once it has
        # cleaned up after them); give them the grace, then kill what is left.
        deadline = time.monotonic() + max(grace_s, 5.0)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _killpg(pgid)
        # What a killed vLLM's tracker did not remove: its shared memory (RAM, on tmpfs).
        for path in shm:
            with contextlib.suppress(OSError):
                path.unlink()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the server (SIGTERM to drain saber-gateway, SIGHUP to reload it)."""
        if self._proc is not None:
            self._proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Wait for the server to exit by itself; its exit status (subprocess's: -N for a
        signal N). subprocess.TimeoutExpired if it is still running."""
        assert self._proc is not None
        code = self._proc.wait(timeout)
        self._proc = None
        return code

    def restart(self) -> EngineProcess:
        """Stop, then start again on the same port."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def _failure(self, what: str) -> str:
        return (
            f"{self.kind} engine {what}\ncommand: {' '.join(self.argv)}\n"
            f"--- last lines of {self.log_path} ---\n{self.log_tail()}"
        )

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EngineProcess({self.kind!r}, {self.base_url!r}, {self.model!r}, pid={self.pid})"


def _set_session_nice(pid: int, nice: int) -> None:
    """Rank the session ``pid`` leads against the machine's other sessions; a kernel
    without autogroups, or a user without the right to raise a priority, keeps the
    default."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _kill_group(pgid: int) -> None:
    """SIGKILL the group but Python's multiprocessing resource trackers: those outlive
    their parent by design, to unlink the semaphores and shared memory it leaves."""
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError):
            if b"multiprocessing.resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            os.kill(pid, signal.SIGKILL)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                members.append(int(stat.parent.name))
    return members


def _shared_memory(pgid: int) -> set[Path]:
    """The /dev/shm files the engine's processes have mapped now."""
    found: set[Path] = set()
    for pid in _group_members(pgid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                at = line.find("/dev/shm/")
                if at >= 0:
                    found.add(Path(line[at:].removesuffix(" (deleted)")))
    return found


def _die_with_parent(parent: int) -> Callable[[], None]:
    """In the forked child, before exec: SIGTERM when the test process dies. Its own
    session keeps Ctrl-C from the engine, and atexit does not run when the test process
    is killed (a CI timeout, the OOM killer, ci_repeat's subprocess interrupted): without
    this an engine of GBs would outlive the run. The setting survives exec (nice,
    taskset, the engine); the workers the engine forks go when it stops them."""

    def in_child() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody would signal
            os._exit(1)

    return in_child


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


@atexit.register
def _stop_all() -> None:
    """An interrupted test run must not leave engines (GBs of RAM) behind."""
    for engine in list(_LIVE):
        engine.stop(grace_s=5.0)
