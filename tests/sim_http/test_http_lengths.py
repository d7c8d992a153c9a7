"""The documented rules: prompt token counts, output lengths, answer text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from saber.config import load_tasks
from saber.sim.http.lengths import LengthSpec, OutputLengths, chat_prompt, completion_prompts
from saber.sim.http.responses.text import make_answer
from saber.workload import CHAT_TOKENS_PER_MESSAGE, make_prompt, sample_output_tokens


def test_completion_prompt_rules() -> None:
    assert [p.tokens for p in completion_prompts("def f ( x ) :")] == [6]
    assert [p.tokens for p in completion_prompts("")] == [1]  # BOS
    assert [p.tokens for p in completion_prompts([1, 2, 3])] == [3]
    assert [p.tokens for p in completion_prompts(["a b", "c"])] == [2, 1]
    assert [p.tokens for p in completion_prompts([[1, 2], [3]])] == [2, 1]


def test_chat_prompt_counts_template_tokens_and_guesses_from_last_user_message() -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": make_prompt("code_summary", 20)},
    ]
    prompt = chat_prompt(messages)
    assert prompt.tokens == 3 + 20 + 2 * CHAT_TOKENS_PER_MESSAGE
    assert prompt.text.startswith("Summarize this code:")
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b c"}]}]
    assert chat_prompt(parts).tokens == 3 + CHAT_TOKENS_PER_MESSAGE


def test_length_specs() -> None:
    assert LengthSpec.parse("task").kind == "task"
    assert LengthSpec.parse("fixed:7").sample(np.random.default_rng(0)) == 7
    assert LengthSpec.parse("lognormal:50:0").sample(np.random.default_rng(0)) == 50
    for bad in ("", "fixed", "fixed:0", "lognormal:10", "lognormal:x:1", "uniform:1:2"):
        with pytest.raises(ValueError):
            LengthSpec.parse(bad)


def test_ignore_eos_gives_exactly_max_tokens() -> None:
    lengths = OutputLengths()
    assert lengths.output_tokens("anything", max_tokens=37, ignore_eos=True) == (37, False)


def test_task_lengths_follow_the_task_distribution_deterministically() -> None:
    lengths = OutputLengths(seed=3)
    tasks = load_tasks()
    draws = [lengths.natural(make_prompt("code_generation", 50, offset=i)) for i in range(400)]
    assert draws == [
        lengths.natural(make_prompt("code_generation", 50, offset=i)) for i in range(400)
    ]
    reference = sample_output_tokens(np.random.default_rng(0), tasks["code_generation"], 4000)
    assert np.mean(draws) == pytest.approx(reference.mean(), rel=0.1)
    assert max(draws) <= tasks["code_generation"].max_tokens
    qna = [lengths.natural(make_prompt("code_qna", 50, offset=i)) for i in range(400)]
    assert np.mean(qna) == pytest.approx(tasks["code_qna"].mean_output_tokens, rel=0.15)
    other = [
        OutputLengths(seed=4).natural(make_prompt("code_qna", 50, offset=i)) for i in range(50)
    ]
    assert other != qna[:50]  # the seed matters


def test_unknown_prompts_use_the_fallback_and_fixed_overrides_all() -> None:
    assert OutputLengths(fallback="fixed:9").natural("no marker here") == 9
    fixed = OutputLengths("fixed:12")
    assert fixed.natural(make_prompt("code_translation", 30)) == 12


def test_cap_and_min_tokens_and_finish_reason() -> None:
    lengths = OutputLengths("fixed:50")
    assert lengths.output_tokens("x", max_tokens=20, ignore_eos=False) == (20, False)  # length
    assert lengths.output_tokens("x", max_tokens=80, ignore_eos=False) == (50, True)  # stop
    assert lengths.output_tokens("x", max_tokens=80, ignore_eos=False, min_tokens=60) == (60, True)


@given(st.integers(1, 300), st.integers(0, 300), st.integers(0, 300))
def test_pieces_join_to_the_text(tokens: int, a: int, b: int) -> None:
    answer = make_answer(tokens, ended=False)
    assert answer.tokens == tokens
    assert len(answer.text.split()) == tokens
    a, b = sorted((min(a, tokens), min(b, tokens)))
    assert answer.piece(0, a) + answer.piece(a, b) + answer.piece(b, tokens) == answer.text
    answer.text.encode("utf-8")


def test_stop_strings_cut_the_answer_like_vllm() -> None:
    # filler starts "def return self value list dict ..."
    answer = make_answer(10, ended=False, stop=["value"])
    assert answer.tokens == 4 and answer.finish_reason == "stop"
    assert answer.stop_reason == "value" and answer.text == "def return self "
    kept = make_answer(10, ended=False, stop=["value"], include_stop=True)
    assert kept.text == "def return self value"
    late = make_answer(10, ended=False, stop=["def"], min_tokens=2)
    assert late.finish_reason == "length" and late.tokens == 10  # no later "def"
    unmatched = make_answer(10, ended=True, stop=["\n\n"])
    assert unmatched.finish_reason == "stop" and unmatched.stop_reason is None
