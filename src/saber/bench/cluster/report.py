"""A pool run as rows (one per workload x load x policy, means over seeds), JSON and
markdown. A run with several gateways adds, per replica, the most requests it held and
the most some gateway did not count there; a run without is written as before."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from saber.bench._grid import VLLM_DEFAULT_MAX_NUM_SEQS
from saber.bench._report import dumps
from saber.bench.cluster.run import (
    ClusterRun,
    PointResult,
    describe_pool,
    gateway_policies,
)


def _multi(run: ClusterRun) -> list[str]:
    """The run's multi-gateway policies (``saber xM``), in its order."""
    names = set(gateway_policies(run.bench.gateways))
    return [p for p in run.bench.policies if p in names]


def rows(run: ClusterRun) -> list[dict[str, Any]]:
    """One row per (workload, multiple, policy): goodput, refused and each replica's
    share of the requests in percent, preemptions per run, means over the seeds; and
    the load's ceiling (each request alone on the pool's best replica), the same in
    every policy's row."""
    groups: dict[tuple[str, float], list[PointResult]] = {}
    for r in run.results:
        groups.setdefault((r.point.workload, r.point.multiple), []).append(r)
    out, multi = [], set(_multi(run))
    for (workload, multiple), results in groups.items():
        for policy in run.bench.policies:
            runs = [r.runs[policy] for r in results]
            shares = np.mean([np.array(s.per_backend) / sum(s.per_backend) for s in runs], 0)
            tasks = sorted({t for s in runs for t in s.task_goodput})
            out.append(
                {
                    "workload": workload,
                    "multiple": multiple,
                    "rps": results[0].point.rps,
                    "capacity_rps": run.capacity[workload],
                    "policy": policy,
                    "seeds": len(runs),
                    "goodput": 100 * float(np.mean([s.goodput for s in runs])),
                    "goodput_by_seed": [100 * s.goodput for s in runs],
                    "ceiling": 100 * float(np.mean([r.ceiling for r in results])),
                    "refused": 100 * float(np.mean([s.refused for s in runs])),
                    "share_by_replica": [100 * float(x) for x in shares],
                    "preemptions": float(np.mean([s.preemptions for s in runs])),
                    "task_goodput": {
                        t: 100 * float(np.mean([s.task_goodput.get(t, 0.0) for s in runs]))
                        for t in tasks
                    },
                }
            )
            if multi:  # the most over the seeds: the claim is about the worst moment
                row = out[-1]
                row["max_in_engine_by_replica"] = _most([s.max_in_engine for s in runs])
                if policy in multi:
                    row["max_unseen_by_replica"] = _most([s.max_unseen for s in runs])
    return out


def _most(per_seed: Sequence[Sequence[int]]) -> list[int]:
    """Per replica, the most over the seeds (empty where a run kept no counts)."""
    return [max(col) for col in zip(*per_seed, strict=True)] if all(per_seed) else []


def to_json(run: ClusterRun) -> str:
    """The run's set-up, each replica's and the pool's capacity, and every row."""
    bench = run.bench
    setup = dataclasses.asdict(bench)
    setup["requests"] = bench.trace_requests
    if not _multi(run):  # one gateway: no scrapes, and the set-up written as before
        del setup["gateways"], setup["scrape_s"], setup["headroom"]
    return dumps(
        {
            "bench": setup,
            "pool": describe_pool(bench.pool),
            "max_num_seqs": VLLM_DEFAULT_MAX_NUM_SEQS,
            "policies": list(bench.policies),
            "replica_capacity_rps": run.rates,
            "capacity_rps": run.capacity,
            "rows": rows(run),
        }
    )


def _headroom(fixed: int | None) -> str:
    if fixed is None:
        return "a headroom of (M - 1) x what it admitted there since its last scrape"
    return (
        f"a fixed headroom of {fixed}, each gateway admitting at most {fixed} // (M - 1) "
        "(at least 1) at each replica in any scrape interval"
    )


def _header(run: ClusterRun) -> list[str]:
    bench = run.bench
    caps = ", ".join(f"{w} {c:.3g}" for w, c in run.capacity.items())
    gateways = (
        [
            f"{', '.join(_multi(run))}: M gateways in front of the pool, each its own "
            "saber pool; a request goes to gateway crc32(id) % M; each gateway learns what "
            "the others run at each replica only by scraping its running + waiting every "
            f"{bench.scrape_s:g} s (staggered), plus {_headroom(bench.headroom)} "
            "(none for no-headroom).\n"
        ]
        if _multi(run)
        else []
    )
    return [
        f"## Pool: {describe_pool(bench.pool)}\n",
        f"Each replica vLLM (max_num_seqs {VLLM_DEFAULT_MAX_NUM_SEQS}): alone behind each "
        "router (round-robin, least-outstanding, queue-kv); behind the gateway's admission "
        "placing by the chance of meeting the deadline (saber), or as a router would "
        f"(saber+round-robin, saber+least-loaded). {bench.mode.capitalize()} mode, "
        f"{bench.trace_requests} "
        "requests per trace, "
        f"{bench.seeds} trace(s) per load (seeds {bench.seed_base}.."
        f"{bench.seed_base + bench.seeds - 1}). Load = a multiple of the pool's capacity, "
        f"the sum of its replicas' saturation rates (requests/s): {caps}.\n",
        *gateways,
    ]


def _table(
    data: Sequence[dict[str, Any]], policies: Sequence[str], cell: str, *, ceiling: bool = False
) -> list[str]:
    """One row per load, one column per policy; ``ceiling`` adds the load's ceiling."""
    by = {(r["workload"], r["multiple"], r["policy"]): r for r in data}
    loads = list(dict.fromkeys((r["workload"], r["multiple"], r["rps"]) for r in data))
    extra = ["ceiling"] if ceiling else []
    out = [
        "| workload | load | req/s | " + " | ".join([*policies, *extra]) + " |",
        "|---|---|---|" + "---|" * (len(policies) + len(extra)),
    ]
    for w, m, rps in loads:
        cells = []
        for p in policies:
            r = by[(w, m, p)]
            if cell == "share":
                cells.append(" / ".join(f"{x:.0f}" for x in r["share_by_replica"]))
            elif cell.endswith("_by_replica"):
                cells.append(" / ".join(f"{x}" for x in r[cell]))
            else:
                cells.append(f"{r[cell]:.1f}")
        if ceiling:
            cells.append(f"{by[(w, m, policies[0])]['ceiling']:.1f}")
        out.append(f"| {w} | {m:g}x | {rps:.3g} | " + " | ".join(cells) + " |")
    return out


def table(run: ClusterRun) -> str:
    """Goodput per load and policy, and where each policy sent the requests."""
    data, policies = rows(run), run.bench.policies
    replicas = ", ".join(run.bench.pool)
    return "\n".join(
        [
            *_header(run),
            "Goodput (% of requests within their SLA); ceiling: the share that meets its "
            "SLA alone on an idle replica of the best kind, which no policy passes:\n",
            *_table(data, policies, "goodput", ceiling=True),
            f"\nShare of the requests sent to each replica (%; {replicas}):\n",
            *_table(data, policies, "share"),
            *_gateway_tables(run, data),
        ]
    ) + "\n"  # fmt: skip


def _gateway_tables(run: ClusterRun, data: Sequence[dict[str, Any]]) -> list[str]:
    """With several gateways: the most requests each replica held (every policy's), and
    the most of them some gateway did not count there."""
    multi = _multi(run)
    if not multi:
        return []
    return [
        "\nMost requests in each replica at once (running + waiting at a step's start, "
        "max over seeds):\n",
        *_table(data, run.bench.policies, "max_in_engine_by_replica"),
        "\nUnseen overload: the most requests at each replica beyond what some gateway "
        "counted there (its own + seen at its last scrape + headroom), at a step's start, "
        "max over gateways and seeds:\n",
        *_table(data, multi, "max_unseen_by_replica"),
    ]


def markdown(run: ClusterRun) -> str:
    """``table``, then the % refused and the preemptions per run."""
    data, policies = rows(run), run.bench.policies
    return "\n".join(
        [
            table(run),
            "Refused (% never served: rejected, or still waiting when the run ended):\n",
            *_table(data, policies, "refused"),
            "\nPreemptions per run (all replicas):\n",
            *_table(data, policies, "preemptions"),
        ]
    ) + "\n"  # fmt: skip
