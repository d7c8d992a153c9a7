"""bench/pool_misses.py on one short trace: every request in one group, none of the
group that no replica serves in time alone is met, and no policy meets or places more
requests of a group than it has."""

from __future__ import annotations

import pytest

from harness import bench_script


def test_each_request_is_counted_once_and_the_unservable_are_never_met(capsys):
    script = bench_script("pool_misses")
    argv = ["--workload", "W1", "--multiples", "1", "--seeds", "1", "--requests", "90"]
    assert script.main([*argv, "--policies", "saber,round-robin"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1x |")]
    assert rows, "no table rows"
    total = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        group, requests = cells[1], int(cells[2])
        total += requests
        for met, placed in ((cells[3], cells[4]), (cells[5], cells[6])):
            assert 0 <= int(met) <= requests
            assert sum(int(x) for x in placed.split(" / ")) <= requests
            if group == "none":
                assert int(met) == 0
        # round-robin places every request, each on one replica kind
        assert sum(int(x) for x in cells[6].split(" / ")) == requests
    assert total == 90


def test_an_unknown_policy_is_an_error_that_names_the_known_ones(capsys):
    script = bench_script("pool_misses")
    with pytest.raises(SystemExit):
        script.main(["--policies", "fastest"])
    assert "unknown policy 'fastest'" in capsys.readouterr().err
