"""Run a test tier N times and say which tests failed in which runs.

Each run is ``python -m pytest ARGS --junitxml=OUT/run-I.xml`` from the repository
root, its output in ``OUT/run-I.log``. At the end: each run's exit status, wall time,
load average at its start, the checkout it ran on and pytest's summary line; then, per
test that did not pass in every run, ``passed/N`` and, for each run it failed, the first
line of the failure message. Exit status 1 if any run failed (pytest's own status was
not 0), else 0.

The checkout is the commit, with a digest of any uncommitted change to tracked files
(``abc1234+5f3e2a``). A run during which it changed (a ``git pull`` in the clone under
test) is flagged: Python had loaded some files before the change and read others after,
so its result belongs to no single commit.

``--load`` keeps every core busy while the runs go on: one CPU-burning process per core
(``--load-procs``), each stopping when this script ends (it watches its parent) or after
``--load-max-s``, so that the default suite can be checked on a busy machine.

    bench/ci_repeat.sh 5 -m llamacpp                  # the llama.cpp tier, five times
    bench/ci_repeat.sh 3 --load -q                    # the default suite, cores busy
    bench/ci_repeat.sh 10 --out out/drift -- -m llamacpp tests/real/test_drift_llamacpp.py

Options of this script (before ``--``, anywhere among pytest's arguments; everything
after ``--`` goes to pytest as it is): ``--out DIR`` (default ``out/ci-repeat/STAMP``),
``--load``, ``--load-procs K``, ``--load-max-s S``, ``--all`` (every test in the table,
not only those that failed somewhere).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# A burner: spins until its deadline or until the script that started it is gone.
BURN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


@dataclass
class Run:
    """One pytest run: how it ended, and each test's outcome."""

    index: int
    returncode: int
    wall_s: float
    load_at_start: float
    summary: str  # pytest's last line ("12 passed in 3.1s")
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)  # id: (outcome, message)
    checkout: str = "?"  # at its start
    checkout_after: str = "?"

    @property
    def checkout_changed(self) -> bool:
        return self.checkout != self.checkout_after

    @property
    def failed(self) -> bool:
        return self.returncode != 0


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's options, and pytest's arguments (in their order)."""
    ours, theirs = argv, []
    if "--" in argv:
        ours, theirs = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(
        prog="bench/ci_repeat.sh",
        description="Run pytest N times; a table of each test's passes and failures.",
        allow_abbrev=False,
    )
    parser.add_argument("runs", type=int, metavar="N", help="how many runs")
    parser.add_argument("--out", type=Path, help="folder for the junit XML files and logs")
    parser.add_argument("--load", action="store_true", help="keep every core busy meanwhile")
    parser.add_argument("--load-procs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--load-max-s", type=float, default=4 * 3600.0)
    parser.add_argument("--all", action="store_true", help="every test in the table")
    args, pytest_args = parser.parse_known_args(ours)
    if args.runs < 1:
        parser.error("N must be at least 1")
    return args, pytest_args + theirs


def test_id(case: ET.Element) -> str:
    """pytest's node id, from a junit (xunit1) testcase: file::Class::name."""
    name, classname = case.get("name", "?"), case.get("classname", "")
    path = case.get("file")
    if not path:
        return f"{classname}::{name}" if classname else name
    module = path.removesuffix(".py").replace("/", ".").replace(os.sep, ".")
    inner = classname.removeprefix(module).lstrip(".")
    return "::".join([path, *([inner] if inner else []), name])


def read_junit(path: Path) -> dict[str, tuple[str, str]]:
    """Each test's outcome (passed, failed, error, skipped) and the first line of its
    failure message."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                text = found.get("message") or found.text or ""
                outcome = "failed" if kind == "failure" else kind
                message = text.strip().splitlines()[0] if text.strip() else ""
                break
        out[test_id(case)] = (outcome, message)
    return out


def last_line(log: Path) -> str:
    """pytest's summary line, without its rule of = signs."""
    lines = [line.strip("= ") for line in log.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else ""


def checkout_state() -> str:
    """The commit under test, with a digest of uncommitted changes to tracked files;
    ``?`` outside a git checkout."""
    try:
        head = _git("rev-parse", "--short", "HEAD").decode().strip()
        diff = _git("diff", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (f"+{hashlib.sha1(diff).hexdigest()[:6]}" if diff else "")


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, check=True).stdout


def run_once(index: int, pytest_args: list[str], out: Path) -> Run:
    xml, log = out / f"run-{index}.xml", out / f"run-{index}.log"
    argv = [sys.executable, "-m", "pytest", *pytest_args, f"--junitxml={xml}"]
    argv += ["-o", "junit_family=xunit1"]  # carries each test's file: its node id
    load = os.getloadavg()[0]
    checkout = checkout_state()
    started = time.monotonic()
    with log.open("w") as sink:
        done = subprocess.run(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    outcomes = read_junit(xml) if xml.exists() else {}
    summary = last_line(log)
    return Run(index, done.returncode, wall, load, summary, outcomes, checkout, checkout_state())


def start_load(procs: int, max_s: float) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", BURN, str(os.getpid()), str(max_s)])
        for _ in range(procs)
    ]


def stop_load(burners: list[subprocess.Popen[bytes]]) -> None:
    for proc in burners:
        proc.terminate()
    for proc in burners:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report(runs: list[Run], show_all: bool) -> str:
    n = len(runs)
    width = max(len("checkout"), *(len(_checkout(r)) for r in runs))
    lines = [f"run  status  wall      load  {'checkout':<{width}}  pytest"]
    for r in runs:
        status = "ok" if not r.failed else f"rc={r.returncode}"
        lines.append(
            f"{r.index:>3}  {status:<6}  {r.wall_s:7.1f}s  {r.load_at_start:4.1f}  "
            f"{_checkout(r):<{width}}  {r.summary}"
        )
    changed = [r.index for r in runs if r.checkout_changed]
    if changed:
        lines.append(
            f"the checkout changed during run(s) {changed}: their results belong to no "
            "single commit"
        )
    ids = sorted({test for r in runs for test in r.outcomes})
    rows = []
    for test in ids:
        seen = [
            (r.index, *r.outcomes.get(test, ("missing", "not in this run's XML"))) for r in runs
        ]
        passed = sum(outcome in ("passed", "skipped") for _, outcome, _ in seen)
        if passed < n or show_all:
            rows.append((test, passed, [s for s in seen if s[1] not in ("passed", "skipped")]))
    clean = len(ids) - sum(1 for _, passed, _ in rows if passed < n)
    lines.append("")
    lines.append(f"{clean} of {len(ids)} tests passed (or were skipped) in all {n} runs")
    for test, passed, bad in rows:
        lines.append(f"{passed}/{n}  {test}")
        for index, outcome, message in bad:
            lines.append(f"       run {index}: {outcome}: {message}")
    no_xml = [r.index for r in runs if not r.outcomes]
    if no_xml:
        lines.append(f"runs without a junit XML (pytest did not get that far): {no_xml}")
    return "\n".join(lines)


def _checkout(run: Run) -> str:
    if run.checkout_changed:
        return f"{run.checkout}->{run.checkout_after}"
    return run.checkout


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse_args(sys.argv[1:] if argv is None else argv)
    out = args.out or REPO / "out" / "ci-repeat" / datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(f"{args.runs} run(s) of: pytest {' '.join(pytest_args)}; results in {out}", flush=True)
    burners = start_load(args.load_procs, args.load_max_s) if args.load else []
    if burners:
        print(f"load: {len(burners)} CPU-burning processes, at most {args.load_max_s:g} s")
    runs = []
    try:
        for i in range(1, args.runs + 1):
            run = run_once(i, pytest_args, out)
            runs.append(run)
            status = "ok" if not run.failed else f"FAILED (rc={run.returncode})"
            print(f"run {i}/{args.runs}: {status} in {run.wall_s:.1f} s: {run.summary}", flush=True)
    finally:
        stop_load(burners)
    text = report(runs, args.all)
    (out / "summary.txt").write_text(text + "\n")
    print("\n" + text)
    return 1 if any(r.failed for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
