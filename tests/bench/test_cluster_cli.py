"""``saber-bench cluster``: a pool of replicas behind each router and the gateway, in-process."""

from __future__ import annotations

import json

import pytest

from saber.bench.cli import main
from saber.bench.cluster.run import describe_pool, parse_pool, policies, with_gateways
from saber.sim import ROUTERS

SMALL = ["--workloads", "W1", "--multiples", "1", "--seeds", "1", "--requests", "40"]
SMALL += ["--jobs", "1", "--no-progress"]


def test_cluster_cli_writes_results_json_markdown_and_a_plot(tmp_path, capsys):
    assert main(["cluster", *SMALL, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("## Pool: 2x a10-qwen2.5-coder-3b + 1x a100-40gb-qwen2.5-coder-3b")
    assert "| W1 | 1x |" in printed and "Share of the requests" in printed
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["policies"] == list(policies()) and data["max_num_seqs"] == 256
    assert set(ROUTERS) < set(policies()) and "saber" in policies()
    rates = data["replica_capacity_rps"]
    pool = 2 * rates["a10-qwen2.5-coder-3b"]["W1"] + rates["a100-40gb-qwen2.5-coder-3b"]["W1"]
    assert data["capacity_rps"]["W1"] == pytest.approx(pool)
    rows = data["rows"]
    assert [r["policy"] for r in rows] == list(policies())
    for row in rows:
        assert (row["workload"], row["multiple"], row["seeds"]) == ("W1", 1.0, 1)
        assert row["rps"] == pytest.approx(pool) and row["capacity_rps"] == pytest.approx(pool)
        assert 0 < row["goodput"] <= row["ceiling"] <= 100
        assert row["ceiling"] == rows[0]["ceiling"]  # the load's, whatever the policy
        if row["policy"] in ROUTERS:
            assert row["refused"] == 0.0  # a router refuses none
        assert row["goodput_by_seed"] == [row["goodput"]]
        assert len(row["share_by_replica"]) == 3
        assert sum(row["share_by_replica"]) == pytest.approx(100.0)
    by = {r["policy"]: r for r in rows}
    assert by["round-robin"]["share_by_replica"] == pytest.approx([35.0, 32.5, 32.5])
    text = (tmp_path / "results.md").read_text()
    assert "Goodput" in text and "Refused" in text and "Preemptions" in text
    assert f"| {rows[0]['ceiling']:.1f} |" in text.split("Share of")[0]
    assert (tmp_path / "cluster_goodput.png").stat().st_size > 10_000


def test_cluster_cli_json_and_a_chosen_pool_and_policies(capsys):
    main(
        ["cluster", *SMALL, "--pool", "paper,1xpaper", "--policies", "queue-kv", "--format", "json"]
    )
    data = json.loads(capsys.readouterr().out)
    assert data["pool"] == "2x paper" and data["bench"]["pool"] == ["paper", "paper"]
    (row,) = data["rows"]
    assert row["policy"] == "queue-kv" and len(row["share_by_replica"]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "2xh200-llama"], "unknown preset"),
        (["--pool", "0xpaper"], "at least one replica"),
        (["--policies", "random"], "unknown policies random"),
        (["--workloads", "W9"], "unknown workload"),
        (["--multiples", "0"], "--multiples must be positive"),
        (["--gateways", "0,2"], "--gateways must be numbers >= 1"),
        (["--scrape-s", "0"], "--scrape-s must be > 0"),
        (["--headroom", "-1"], "--headroom must be >= 0"),
        (["--policies", "saber x2"], "unknown policies saber x2"),  # no --gateways 2
    ],
)
def test_cluster_cli_refuses_bad_options(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["cluster", *SMALL, *args])
    assert message in f"{info.value.code} {capsys.readouterr().err}"  # ours, or argparse's


def test_a_fixed_headroom_leaves_no_overload_unseen(capsys):
    # Two gateways with a fixed headroom keep to budget_of(8, 2) = 8 per scrape; the
    # default 100 requests per replica make the trace.
    args = ["--workloads", "W2", "--multiples", "2", "--seeds", "1", "--jobs", "1"]
    args += ["--no-progress", "--policies", "saber", "--gateways", "1,2", "--headroom", "8"]
    main(["cluster", *args, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert data["bench"]["headroom"] == 8 and data["bench"]["requests"] == 300
    by = {r["policy"]: r for r in data["rows"]}
    assert by["saber x2"]["max_unseen_by_replica"] == [0, 0, 0]
    assert max(by["saber x2 no-headroom"]["max_unseen_by_replica"]) > 0


def test_a_pool_is_written_as_counts_of_presets():
    assert parse_pool("2xa, 1xb,c") == ("a", "a", "b", "c")
    assert describe_pool(("a", "b", "a")) == "2x a + 1x b"
    assert set(policies()) == {*ROUTERS, "saber", "saber+round-robin", "saber+least-loaded"}


def test_cluster_cli_with_several_gateways(tmp_path, capsys):
    args = ["cluster", *SMALL, "--policies", "queue-kv,saber", "--gateways", "1,2"]
    assert main([*args, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "saber x2, saber x2 no-headroom: M gateways" in printed
    assert "Unseen overload" in printed and "Most requests in each replica" in printed
    data = json.loads((tmp_path / "results.json").read_text())
    names = ["queue-kv", "saber", "saber x2", "saber x2 no-headroom"]
    assert data["policies"] == names
    assert data["bench"]["gateways"] == [1, 2] and data["bench"]["scrape_s"] == 0.2
    by = {r["policy"]: r for r in data["rows"]}
    assert list(by) == names
    for name, row in by.items():
        assert 0 < row["goodput"] <= 100
        assert sum(row["share_by_replica"]) == pytest.approx(100.0)
        assert len(row["max_in_engine_by_replica"]) == 3 and min(row["max_in_engine_by_replica"])
        unseen = row.get("max_unseen_by_replica")
        assert (unseen is not None) == name.startswith("saber x")
        assert unseen is None or (len(unseen) == 3 and min(unseen) >= 0)
    assert "Unseen overload" in (tmp_path / "results.md").read_text()


def test_gateways_add_the_saber_variants_only_with_saber():
    assert with_gateways(("queue-kv", "saber"), (1, 2, 4)) == (
        "queue-kv", "saber", "saber x2", "saber x2 no-headroom", "saber x4",
    )  # fmt: skip
    assert with_gateways(("queue-kv",), (1, 2)) == ("queue-kv",)
    assert with_gateways(("saber x4", "saber"), (4,)) == ("saber x4", "saber")
    assert set(policies((1, 3))) == set(policies()) | {"saber x3"}


def test_oracle_mode_tells_the_gateways_the_lengths_and_leaves_the_routers_alone(capsys):
    # The same traces either way; only what the gateways are told changes.
    args = ["cluster", "--workloads", "W1", "--multiples", "1.5", "--seeds", "1"]
    args += ["--requests", "60", "--jobs", "1", "--no-progress", "--format", "json"]
    args += ["--policies", "queue-kv,saber", "--gateways", "1,2"]
    by_mode = {}
    for mode in ("realistic", "oracle"):
        main([*args, "--mode", mode])
        data = json.loads(capsys.readouterr().out)
        assert data["bench"]["mode"] == mode
        by_mode[mode] = {r["policy"]: r for r in data["rows"]}
    real, oracle = by_mode["realistic"], by_mode["oracle"]
    assert oracle["queue-kv"]["goodput"] == real["queue-kv"]["goodput"]
    assert oracle["saber"]["ceiling"] == real["saber"]["ceiling"]
    for name in ("saber", "saber x2"):
        assert oracle[name]["goodput"] > real[name]["goodput"]
