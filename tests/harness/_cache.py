"""Where the engines, their environments and the tiny models are kept between runs.

Every artefact is built under a lock into its final place and counted as done only
once a marker file exists, so an interrupted build is redone rather than trusted,
and two processes preparing at once (pytest and the CLI) do not build twice.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

MARKER = ".saber-ready"


def cache_dir() -> Path:
    """``$SABER_CACHE_DIR``, else ``~/.cache/saber``."""
    env = os.environ.get("SABER_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "saber"


def is_ready(path: Path) -> bool:
    return (path / MARKER).is_file()


def mark_ready(path: Path, note: str = "") -> None:
    (path / MARKER).write_text(note + "\n")


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path.lock`` (created with its parent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def log(message: str) -> None:
    """Progress for people watching a long build (stderr, so stdout stays clean)."""
    print(f"[harness {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(cmd: Sequence[str | os.PathLike[str]], *, log_file: Path, cwd: Path | None = None) -> None:
    """Run a build step, its output appended to ``log_file``; on failure raise with its tail."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    args = [str(c) for c in cmd]
    with open(log_file, "a") as out:
        out.write(f"\n$ {' '.join(args)}\n")
        out.flush()
        rc = subprocess.run(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(
            f"command failed (exit {rc}): {' '.join(args)}\n"
            f"--- last lines of {log_file} ---\n{tail(log_file)}"
        )


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
