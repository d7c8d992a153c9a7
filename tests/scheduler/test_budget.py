"""The admission budget of one of several gateways (``set_budget``): at most so many
sequences admitted at a backend in any window, so that what the other gateways admit
between two scrapes never passes a fixed headroom."""

from __future__ import annotations

import pytest

from saber.config import TaskType
from saber.scheduler import Action, Decision, Placed, Policy, Pool, budget_of, request_for

# Short answers on a fast, flat engine: every request passes at once but for the budget.
TASK = TaskType(name="t", mean_input_tokens=20, mean_output_tokens=10, sla_s=30.0, max_tokens=20)


def flat(load: float) -> float:
    return 1000.0


def pool(
    backends: int = 1, budget: int | None = None, window: float = 0.2, policy: str = "closed-loop"
) -> Pool:
    p = Pool.build([flat] * backends, Policy.named(policy), tasks=[TASK])
    if budget is not None:
        p.set_budget(budget, window)
    return p


def admitted(out: list[Placed] | list[Decision]) -> list[str]:
    decisions = [o.decision if isinstance(o, Placed) else o for o in out]
    return [d.request.id for d in decisions if d.action is Action.ADMIT]


def offer_all(p: Pool, n: int, now: float, first: int = 0, seqs: int = 1) -> list[str]:
    out: list[str] = []
    for i in range(first, first + n):
        req = request_for(TASK, id=f"r{i}", arrival=now, seqs=seqs)
        out += admitted(p.offer(req, now))
    return out


def test_a_budget_admits_so_many_per_window_then_wakes_when_the_oldest_leaves_it():
    p = pool(budget=3, window=0.2)
    assert offer_all(p, 5, 0.0) == ["r0", "r1", "r2"]  # two wait, with room to spare
    assert p.queued() == 2 and p.load == 3
    assert p.next_wakeup() == pytest.approx(0.2)  # when r0..r2 leave the window
    assert admitted(p.poll(0.1)) == []  # still within it
    assert admitted(p.poll(0.2)) == ["r3", "r4"]
    # A sliding window: two at 0.2, so one more fits until 0.4, whatever finishes.
    for rid in ("r0", "r1", "r2"):
        p.finish(rid, 0.25)
    assert offer_all(p, 2, 0.3, first=5) == ["r5"]
    assert p.next_wakeup() == pytest.approx(0.4)
    assert admitted(p.poll(0.4)) == ["r6"]


@pytest.mark.parametrize("policy", ["paper", "mean"])
def test_the_papers_rule_keeps_to_the_budget_too(policy: str) -> None:
    p = pool(budget=3, window=0.2, policy=policy)
    assert len(offer_all(p, 5, 0.0)) == 3
    assert p.next_wakeup() == pytest.approx(0.2)
    assert len(admitted(p.poll(0.1))) == 0
    assert len(admitted(p.poll(0.2))) == 2


def test_demoted_work_keeps_to_the_budget() -> None:
    p = pool(budget=2, window=0.2, policy="paper")
    for i in range(4):  # past their deadlines: demoted on arrival, best effort
        req = request_for(TASK, id=f"r{i}", arrival=-100.0)
        p.offer(req, 0.0)
    started = admitted(p.poll(0.0))
    assert len(started) <= 2 and p.load == 2
    assert len(admitted(p.poll(0.2))) == 2


def test_without_a_budget_every_request_passes_at_once():
    p = pool()
    assert offer_all(p, 40, 0.0) == [f"r{i}" for i in range(40)]
    p.set_budget(2, 1.0)
    p.set_budget(None)  # taken back
    assert offer_all(p, 5, 0.0, first=40) == [f"r{i}" for i in range(40, 45)]


def test_a_request_of_more_sequences_than_the_budget_runs_alone_in_its_window():
    p = pool(budget=2, window=0.5)
    assert offer_all(p, 1, 0.0, seqs=4) == ["r0"]  # never stuck
    assert offer_all(p, 1, 0.1, first=1) == []
    assert admitted(p.poll(0.5)) == ["r1"]


def test_an_idle_engine_and_another_backend_keep_to_the_budget_too():
    # Two backends with 2 each: 4 at once, a fifth waits; moving it to the other
    # backend does not break that one's budget either.
    p = pool(backends=2, budget=2, window=0.2)
    placed = []
    for i in range(5):
        req = request_for(TASK, id=f"r{i}", arrival=0.0)
        placed += [x for x in p.offer(req, 0.0) if x.decision.action is Action.ADMIT]
    by_backend = [sum(x.backend == b for x in placed) for b in (0, 1)]
    assert by_backend == [2, 2] and p.queued() == 1
    for x in placed:
        p.finish(x.decision.request.id, 0.05)  # both engines idle again
    assert admitted(p.poll(0.1)) == []  # idle, yet the window is spent
    assert admitted(p.poll(0.2)) == ["r4"]


def test_the_budget_splits_a_fixed_headroom_over_the_other_gateways():
    assert budget_of(16, 2) == 16
    assert budget_of(16, 3) == 8
    assert budget_of(16, 4) == 5  # 3 x 5 = 15 <= 16
    assert budget_of(1, 4) == 1  # at least one: the bound is then gateways - 1
    for bad in ((4, 1), (-1, 2)):
        with pytest.raises(ValueError):
            budget_of(*bad)
    with pytest.raises(ValueError, match="budget"):
        pool().set_budget(0, 0.2)
    with pytest.raises(ValueError, match="budget"):
        pool().set_budget(2, 0.0)
