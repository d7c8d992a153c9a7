"""Answer lengths conditioned on what a request carries: used where they predict, never
where they do not, and learned from the answers that follow."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from saber.config import TaskType
from saber.scheduler import Policy, Scheduler, TaskLengths, request_for
from saber.scheduler.lengths._prompt_size import PRIOR_BYTES_PER_TOKEN, PromptSize
from saber.speed import MODELS

TASK = TaskType(
    name="t", mean_input_tokens=600, mean_output_tokens=600, sla_s=10.0, max_tokens=4096
)
USL = MODELS["usl"].from_params(lam=130.0, sigma=0.0477, kappa=0.000154)


def lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    return np.maximum(np.rint(rng.lognormal(np.log(mean) - sigma * sigma / 2, sigma, n)), 1)


def teach(lengths: TaskLengths, prompts: np.ndarray, answers: np.ndarray) -> None:
    for p, a in zip(prompts, answers, strict=True):
        carried = lengths.carry(prompt_tokens=int(p))
        lengths.observe("t", int(a), TASK.max_tokens, carried)


def test_answers_that_follow_their_input_are_predicted_from_it():
    rng = np.random.default_rng(1)
    lengths = TaskLengths([TASK], learn=True)
    prompts = lognormal(rng, 600, 0.55, 400)
    teach(lengths, prompts, np.rint(prompts * rng.lognormal(0, 0.3, 400)))
    assert lengths.summary()["t"]["conditioning"] is not None
    short, long = (lengths.carry(prompt_tokens=n) for n in (150, 2400))
    short_dist, long_dist = lengths.pick("t", short), lengths.pick("t", long)
    assert short_dist is not None and long_dist is not None
    expect_short = lengths.expected(TASK, TASK.max_tokens, 0, short_dist)
    expect_long = lengths.expected(TASK, TASK.max_tokens, 0, long_dist)
    # The task's mean is about 650; conditioned, each follows its own prompt.
    assert 100 < expect_short < 300 < 1500 < expect_long < 3500


@pytest.mark.parametrize("seed", range(5))
def test_lengths_independent_of_the_request_are_never_conditioned(seed: int):
    rng = np.random.default_rng(seed)
    lengths = TaskLengths([TASK], learn=True)
    carried = [lengths.carry(prompt_tokens=int(p)) for p in lognormal(rng, 600, 0.55, 600)]
    for c, a in zip(carried, lognormal(rng, 600, 0.55, 600), strict=True):
        lengths.observe("t", int(a), TASK.max_tokens, c)
        assert lengths.pick("t", c) is None  # at no point along the way
    assert lengths.summary()["t"]["conditioning"] is None


def test_repeated_templates_are_recognised_by_their_fingerprint():
    rng = np.random.default_rng(2)
    lengths = TaskLengths([TASK], learn=True)
    scale = {"a": 40, "b": 900}
    for i in range(300):
        key = "a" if i % 3 else "b"
        carried = lengths.carry(fingerprint=key)
        lengths.observe("t", int(scale[key] * rng.lognormal(0, 0.2)), TASK.max_tokens, carried)
    assert lengths.summary()["t"]["conditioning"] in ("fingerprint", "exact")
    a, b = (lengths.pick("t", lengths.carry(fingerprint=k)) for k in "ab")
    assert lengths.expected(TASK, None, 0, a) < 100 < 700 < lengths.expected(TASK, None, 0, b)
    # A fingerprint never seen has nothing of its own: the task's distribution.
    assert lengths.pick("t", lengths.carry(fingerprint="new")) is None


def test_without_signal_decisions_are_exactly_those_of_the_task_distribution():
    """Two schedulers, one conditioning and one not, fed the same requests with
    independent lengths, decide the same thing at every step."""
    rng = np.random.default_rng(3)
    policy = dataclasses.replace(Policy.named("closed-loop"), max_concurrency=64)
    on = Scheduler(USL, policy, tasks=[TASK], seed=0)
    off = Scheduler(USL, dataclasses.replace(policy, condition_lengths=False), tasks=[TASK])
    prompts, answers = lognormal(rng, 600, 0.55, 500), lognormal(rng, 600, 0.55, 500)
    running: list[tuple[float, str]] = []
    now = 0.0
    for i in range(500):
        now += float(rng.exponential(0.3))
        decided = []
        for sched in (on, off):
            req = request_for(
                TASK, id=f"r{i}", arrival=now, max_tokens=4096, lengths=sched.lengths,
                prompt_bytes=int(prompts[i] * 3.6),
            )  # fmt: skip
            decided.append([(d.action, d.request.id) for d in sched.offer(req, now)])
        assert decided[0] == decided[1]
        running += [
            (now + answers[int(rid[1:])] / 100, rid) for act, rid in decided[0] if act == "admit"
        ]
        running.sort()
        while running and running[0][0] <= now:
            _, rid = running.pop(0)
            tokens = int(answers[int(rid[1:])])
            outcomes = [s.finish(rid, now, tokens, int(prompts[int(rid[1:])])) for s in (on, off)]
            assert outcomes[0] == outcomes[1]
            polled = [[(d.action, d.request.id) for d in s.poll(now)] for s in (on, off)]
            assert polled[0] == polled[1]
            running += [(now + answers[int(r[1:])] / 100, r) for a, r in polled[0] if a == "admit"]
            running.sort()
    assert on.lengths.summary()["t"]["conditioning"] is None
    assert on.lengths.prompts.observed > 100


def test_the_bytes_per_token_ratio_converges_from_usage():
    size = PromptSize()
    assert size.bytes_per_token == PRIOR_BYTES_PER_TOKEN
    rng = np.random.default_rng(4)
    for tokens in rng.integers(50, 3000, 200):
        size.observe(int(tokens * 2.7 + rng.normal(0, 20)), int(tokens))
    assert size.bytes_per_token == pytest.approx(2.7, rel=0.03)
    assert size.tokens(2700) == pytest.approx(1000, rel=0.03)
    size.observe(0, 10)  # nothing to learn from
    size.observe(10, 0)
    assert size.observed == 200


def test_a_scheduler_learns_the_ratio_from_finished_requests():
    sched = Scheduler(USL, Policy.named("closed-loop"), tasks=[TASK])
    for i in range(50):
        req = request_for(TASK, id=f"r{i}", arrival=float(i), lengths=sched.lengths,
                          prompt_bytes=3000)  # fmt: skip
        assert any(d.action == "admit" for d in sched.offer(req, float(i)))
        sched.finish(f"r{i}", float(i) + 0.5, 100, prompt_tokens=1000)
    assert sched.lengths.prompts.bytes_per_token == pytest.approx(3.0, rel=0.05)
    req = request_for(TASK, id="x", arrival=99.0, lengths=sched.lengths, prompt_bytes=6000)
    assert req.carried.prompt_tokens == pytest.approx(2000, rel=0.05)


def test_the_conditioned_state_round_trips():
    rng = np.random.default_rng(5)
    lengths = TaskLengths([TASK], learn=True)
    prompts = lognormal(rng, 600, 0.55, 300)
    teach(lengths, prompts, np.rint(prompts * rng.lognormal(0, 0.3, 300)))
    fresh = TaskLengths([TASK], learn=True)
    assert fresh.restore(lengths.state()) == ["t"]
    assert fresh.summary() == lengths.summary()
    carried = fresh.carry(prompt_tokens=2000)
    dist = fresh.pick("t", carried)
    assert dist == lengths.pick("t", lengths.carry(prompt_tokens=2000))
    assert fresh.expected(TASK, None, 0, dist) == lengths.expected(TASK, None, 0, dist)
