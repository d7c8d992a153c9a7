"""SLOs in parts in the scheduler: a TPOT limit is a pace the request must keep and that
admitting others must not take from it; a TTFT limit beside an end-to-end one."""

from __future__ import annotations

import math

import pytest

from saber.config import Slo, TaskType
from saber.scheduler import Action, Policy, Scheduler, request_for


def slowing(load: float) -> float:
    """100 tok/s alone, 83 at 2, 71 at 3, 62 at 4, 56 at 5."""
    return 100.0 / (1.0 + 0.2 * (load - 1.0))


CHAT = TaskType(
    name="chat", mean_input_tokens=50, mean_output_tokens=200, max_tokens=1000,
    ttft_s=1.0, tpot_s=0.016,
)  # fmt: skip
BULK = TaskType(
    name="bulk", mean_input_tokens=50, mean_output_tokens=100, max_tokens=1000, e2e_s=8.0
)


def scheduler() -> Scheduler:
    policy = Policy.named("closed-loop", max_concurrency=64)
    return Scheduler(slowing, policy, tasks=[CHAT, BULK], seed=0)


def admitted(decisions) -> list[str]:
    return [d.request.id for d in decisions if d.action is Action.ADMIT]


def burst(chat_task: TaskType) -> tuple[Scheduler, int]:
    """A chat request streams; ten bulk requests arrive, one every 0.1 s. Returns the
    scheduler and the most that ran at once while the chat request ran."""
    s = Scheduler(slowing, Policy.named("closed-loop", max_concurrency=64), tasks=[chat_task, BULK])
    chat = request_for(chat_task, id="chat", arrival=0.0, max_tokens=1000, lengths=s.lengths)
    assert admitted(s.offer(chat, 0.0)) == ["chat"]
    s.progress("chat", 10, 0.15)  # streaming at 66 tok/s
    most = s.load
    for i in range(10):
        now = 0.2 + 0.1 * i
        req = request_for(BULK, id=f"b{i}", arrival=now, max_tokens=1000, lengths=s.lengths)
        s.offer(req, now)
        most = max(most, s.load)
    return s, most


def test_a_burst_of_others_does_not_take_a_running_request_s_pace():
    chat = request_for(CHAT, id="chat", arrival=0.0, max_tokens=1000)
    assert chat.pace == pytest.approx(62.5) and chat.sla_kind == "ttft"
    # 62.5 tok/s is kept with up to 3 running (71 tok/s), a coin toss at 4 (62.5).
    s, most = burst(CHAT)
    assert most <= 3
    assert s.queued() >= 7  # the rest wait


def test_without_the_pace_limit_the_burst_runs_beside_it():
    _, most = burst(CHAT.with_slo(Slo(ttft_s=1.0)))
    assert most >= 6


def test_a_pace_no_load_can_keep_is_demoted_at_once():
    s = scheduler()
    s.offer(request_for(BULK, id="b", arrival=0.0, max_tokens=1000, lengths=s.lengths), 0.0)
    fast = request_for(
        CHAT, id="fast", arrival=0.0, max_tokens=1000, lengths=s.lengths,
        slo=Slo(tpot_s=0.005),  # 200 tok/s: twice what the engine makes alone
    )  # fmt: skip
    decisions = s.offer(fast, 0.0)
    assert (decisions[0].action, decisions[0].request.id) == (Action.DEMOTE, "fast")
    assert fast.tier == "low"  # served best effort, if at all


def test_a_request_s_own_limits_replace_its_task_s():
    s = scheduler()
    req = request_for(
        BULK, id="r", arrival=10.0, max_tokens=1000, lengths=s.lengths,
        slo=Slo(ttft_s=0.5, tpot_s=0.05),
    )  # fmt: skip
    assert (req.sla_kind, req.deadline, req.first_by, req.pace) == ("e2e", 18.0, 10.5, 20.0)
    only_pace = TaskType(
        name="p", mean_input_tokens=5, mean_output_tokens=5, max_tokens=50, tpot_s=0.1
    )
    req = request_for(only_pace, id="p", arrival=1.0, max_tokens=50)
    assert req.deadline == math.inf and req.pace == pytest.approx(10.0)


def test_a_first_token_limit_beside_an_end_to_end_one_is_raced_too():
    s = scheduler()
    for i in range(3):
        s.offer(request_for(BULK, id=f"b{i}", arrival=0.0, max_tokens=1000, lengths=s.lengths), 0.0)
    both = BULK.with_slo(Slo(ttft_s=0.3, e2e_s=600.0))
    req = request_for(both, id="x", arrival=0.0, max_tokens=1000, lengths=s.lengths)
    # Without a TTFT fit its first token takes one token's time at f(L + 1): 16 ms.
    assert s.chance_of(req, 0.0, s.load + 1) > 0.9
    assert s.chance_of(req, 0.28, s.load + 1) > 0.9
    assert s.chance_of(req, 0.29, s.load + 1) == 0.0  # its first token would be late
