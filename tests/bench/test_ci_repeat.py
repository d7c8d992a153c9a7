"""bench/ci_repeat.py: N runs of pytest, each run's junit XML kept, a table of the tests
that failed in some run with each failure's first line, and a non-zero exit if any did."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import bench_script

# A test file whose second test fails in the first run only (a counter beside it).
TESTS = """
from pathlib import Path

import pytest

COUNT = Path(__file__).with_name("count")


def test_steady():
    pass


def test_first_run_fails():
    n = int(COUNT.read_text()) if COUNT.exists() else 0
    COUNT.write_text(str(n + 1))
    assert n > 0, f"run {n + 1} of the counter\\nand a second line"


def test_skipped():
    pytest.skip("not here")


class TestGrouped:
    @pytest.mark.parametrize("x", [1, 2])
    def test_param(self, x):
        assert x
"""


def test_options_are_its_own_and_the_rest_goes_to_pytest_in_order() -> None:
    ci = bench_script("ci_repeat")
    args, rest = ci.parse_args(["5", "-m", "llamacpp", "--load", "-k", "not slow"])
    assert (args.runs, args.load, args.out, args.all) == (5, True, None, False)
    assert rest == ["-m", "llamacpp", "-k", "not slow"]
    args, rest = ci.parse_args(["2", "--out", "o", "-q", "--", "--load", "tests/x.py"])
    assert (args.runs, args.load, args.out) == (2, False, Path("o"))
    assert rest == ["-q", "--load", "tests/x.py"]
    with pytest.raises(SystemExit):
        ci.parse_args(["0"])


def test_runs_a_table_of_what_failed_and_a_failing_exit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ci = bench_script("ci_repeat")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_sample.py").write_text(TESTS)
    out = tmp_path / "out"
    # --rootdir: node ids relative to the suite wherever the checkout is (from a clone
    # under /tmp, pytest took /tmp, the common ancestor with the working directory).
    argv = ["2", "--out", str(out), "-p", "no:cacheprovider", "--rootdir", str(suite)]
    code = ci.main([*argv, str(suite)])
    printed = capsys.readouterr().out
    assert code == 1
    assert sorted(p.name for p in out.glob("run-*")) == [
        "run-1.log", "run-1.xml", "run-2.log", "run-2.xml"
    ]  # fmt: skip
    assert (out / "summary.txt").read_text().strip() == printed.split("\n\n", 1)[1].strip()
    lines = printed.splitlines()
    rows = [line.split() for line in lines if line[:4].strip() in {"1", "2"}]
    assert [(r[0], r[1]) for r in rows] == [("1", "rc=1"), ("2", "ok")]
    assert all(r[2].endswith("s") and float(r[2][:-1]) > 0 for r in rows)  # wall times
    checkout = ci.checkout_state()
    assert all(r[4] == checkout for r in rows)  # the commit under test ("?" outside git)
    assert rows[0][5:] == ["1", "failed,", "3", "passed,", "1", "skipped", "in", rows[0][-1]]
    assert "checkout changed" not in printed
    assert "4 of 5 tests passed (or were skipped) in all 2 runs" in printed
    flaky = [i for i, line in enumerate(lines) if line.endswith("::test_first_run_fails")]
    assert len(flaky) == 1 and lines[flaky[0]].split() == [
        "1/2", "test_sample.py::test_first_run_fails"
    ]  # fmt: skip
    assert lines[flaky[0] + 1].split() == ["run", "1:", "failed:", "AssertionError:", "run", "1",
                                           "of", "the", "counter"]  # fmt: skip
    assert "second line" not in printed
    assert "TestGrouped" not in printed  # passed every time: not in the table

    # --all: every test, from the runs' XML files.
    runs = [ci.Run(i, 0, 1.0, 0.0, "", ci.read_junit(out / f"run-{i}.xml")) for i in (1, 2)]
    table = ci.report(runs, show_all=True)
    assert "2/2  test_sample.py::TestGrouped::test_param[2]" in table
    assert "2/2  test_sample.py::test_skipped" in table
    assert "1/2  test_sample.py::test_first_run_fails" in table


def test_a_run_during_which_the_checkout_changed_is_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git pull in the clone under test while a run goes on: seen once, a run whose
    process had loaded the old config schema and then read the new config file."""
    ci = bench_script("ci_repeat")
    states = iter(["abc1234", "abc1234", "abc1234", "def5678", "def5678", "def5678"])
    monkeypatch.setattr(ci, "checkout_state", lambda: next(states))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    pass\n")
    argv = ["3", "--out", str(tmp_path / "o"), str(suite), "-p", "no:cacheprovider"]
    assert ci.main(argv) == 0
    table = (tmp_path / "o" / "summary.txt").read_text().splitlines()
    assert [line.split()[4] for line in table[1:4]] == ["abc1234", "abc1234->def5678", "def5678"]
    assert table[4] == (
        "the checkout changed during run(s) [2]: their results belong to no single commit"
    )


def test_load_keeps_the_cores_busy_and_stops_with_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ci = bench_script("ci_repeat")
    start_load, run_once = ci.start_load, ci.run_once
    started: list[subprocess.Popen[bytes]] = []
    alive_during_runs: list[list[bool]] = []

    def start(procs: int, max_s: float) -> list[subprocess.Popen[bytes]]:
        started.extend(start_load(procs, max_s))
        return started

    def run(*args: object) -> object:
        alive_during_runs.append([p.poll() is None for p in started])
        return run_once(*args)

    monkeypatch.setattr(ci, "start_load", start)
    monkeypatch.setattr(ci, "run_once", run)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    pass\n")
    argv = ["1", "--load", "--load-procs", "2", "--out", str(tmp_path / "o"), str(suite)]
    assert ci.main([*argv, "-p", "no:cacheprovider"]) == 0
    assert alive_during_runs == [[True, True]]
    assert all(p.poll() is not None for p in started)  # stopped when the runs ended
