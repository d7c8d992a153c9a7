"""Task type resolution: header, alias, rules, default, in that order."""

from __future__ import annotations

import pytest

from saber.config import load_gateway_config
from saber.gateway.edge.tasks import BACKEND_MODEL, TaskResolver
from saber.gateway.errors import GatewayError


@pytest.fixture
def resolver() -> TaskResolver:
    return TaskResolver(load_gateway_config(env={}))


def test_header_beats_alias_but_alias_is_still_rewritten(resolver: TaskResolver) -> None:
    res = resolver.resolve("chat", header="Code-QnA", model="qwen:code_translation", max_tokens=5)
    assert (res.task.name, res.via, res.model) == ("code_qna", "header", "qwen")


def test_unknown_header_is_a_400(resolver: TaskResolver) -> None:
    with pytest.raises(GatewayError) as info:
        resolver.resolve("chat", header="poetry", model=None, max_tokens=None)
    assert info.value.status == 400
    assert info.value.body()["error"]["code"] == "unknown_task"


def test_model_task_suffix(resolver: TaskResolver) -> None:
    res = resolver.resolve("chat", header=None, model="ns/qwen:1.5b:code_summary", max_tokens=None)
    assert (res.task.name, res.via, res.model) == ("code_summary", "alias", "ns/qwen:1.5b")


def test_colon_that_is_not_a_task_is_left_alone(resolver: TaskResolver) -> None:
    res = resolver.resolve("chat", header=None, model="qwen2.5-coder:1.5b", max_tokens=None)
    assert (res.task.name, res.via, res.model) == ("code_generation", "default", None)


def test_configured_alias_stands_for_the_backend_model(resolver: TaskResolver) -> None:
    res = resolver.resolve("completions", header=None, model="autocomplete", max_tokens=999)
    assert (res.task.name, res.via) == ("code_completion", "alias")
    assert res.model is BACKEND_MODEL


@pytest.mark.parametrize(
    ("endpoint", "max_tokens", "task", "via"),
    [
        ("completions", 64, "code_completion", "rule"),
        ("completions", 256, "code_completion", "rule"),
        ("completions", 257, "code_generation", "default"),
        ("completions", None, "code_generation", "default"),
        ("chat", 16, "code_generation", "default"),
    ],
)
def test_rules_then_default(
    resolver: TaskResolver, endpoint: str, max_tokens: int | None, task: str, via: str
) -> None:
    res = resolver.resolve(endpoint, header=None, model="m", max_tokens=max_tokens)  # type: ignore[arg-type]
    assert (res.task.name, res.via, res.model) == (task, via, None)


@pytest.mark.parametrize(
    ("max_tokens", "sequences", "task"),
    [
        (16, 1, "code_completion"),
        (16, 16, "code_completion"),  # 256 tokens in all: still a short completion
        (16, 17, "code_generation"),
        (8, 50, "code_generation"),  # 50 short prompts are not one short completion
        (256, 2, "code_generation"),
    ],
)
def test_the_short_completion_rule_weighs_every_sequence(
    resolver: TaskResolver, max_tokens: int, sequences: int, task: str
) -> None:
    res = resolver.resolve(
        "completions", header=None, model="m", max_tokens=max_tokens, sequences=sequences
    )
    assert res.task.name == task


def test_alias_listing(resolver: TaskResolver) -> None:
    names = dict(resolver.alias_names(["m1"]))
    assert names["autocomplete"] == "m1"
    assert names["m1:code_qna"] == "m1"
    assert resolver.alias_names([]) == []


# -- fill-in-the-middle ----------------------------------------------------------

PREFIX, SUFFIX = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
FIM_PROMPTS = {
    # Each family's template as the assistants fill it.
    "qwen": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
    "qwen-repo": f"<|repo_name|>app\n<|file_sep|>a.py\nx = 1\n<|file_sep|>b.py\n"
    f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
    "starcoder": f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",
    "santacoder": f"<fim-prefix>{PREFIX}<fim-suffix>{SUFFIX}<fim-middle>",
    "deepseek": f"<\uff5cfim\u2581begin\uff5c>{PREFIX}<\uff5cfim\u2581hole\uff5c>{SUFFIX}"
    "<\uff5cfim\u2581end\uff5c>",
    "codellama": f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>",
    "codestral": f"[SUFFIX]{SUFFIX}[PREFIX]{PREFIX}",
    "seed-coder": f"<[fim-prefix]>{PREFIX}<[fim-suffix]>{SUFFIX}<[fim-middle]>",
    "codegeex4": f"<|user|>\n###PATH:a.py\n<|code_suffix|>{SUFFIX}<|code_prefix|>{PREFIX}"
    "<|code_middle|><|assistant|>\n",
}


@pytest.mark.parametrize("family", sorted(FIM_PROMPTS))
def test_a_fim_prompt_is_code_completion_whatever_its_max_tokens(
    resolver: TaskResolver, family: str
) -> None:
    body = {"model": "qwen-coder", "prompt": FIM_PROMPTS[family], "max_tokens": 4096}
    res = resolver.resolve(
        "completions", header=None, model="qwen-coder", max_tokens=4096, body=body
    )
    assert (res.task.name, res.via, res.model) == ("code_completion", "rule", None)
    # The same text in a list prompt, or with no max_tokens at all.
    body = {"prompt": ["x", FIM_PROMPTS[family]]}
    res = resolver.resolve("completions", header=None, model=None, max_tokens=None, body=body)
    assert res.task.name == "code_completion"


@pytest.mark.parametrize("suffix", ["\n}\n", ""])
def test_a_suffix_is_fim(resolver: TaskResolver, suffix: str) -> None:
    body = {"prompt": "def f(", "suffix": suffix, "max_tokens": 1000}
    res = resolver.resolve("completions", header=None, model="m", max_tokens=1000, body=body)
    assert res.task.name == "code_completion"


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": "Write a function that reverses a list.", "suffix": None},  # Tabby's vllm
        {"prompt": "<html><PRE>text</PRE></html>"},  # one family's markers, not all
        {"prompt": "<|fim_prefix|> is a token of Qwen's"},
        {"prompt": [1, 2, 3]},  # token ids: unreadable
    ],
)
def test_what_is_not_fim(resolver: TaskResolver, body: dict[str, object]) -> None:
    res = resolver.resolve("completions", header=None, model="m", max_tokens=1000, body=body)
    assert (res.task.name, res.via) == ("code_generation", "default")


def test_fim_markers_in_a_chat_are_not_fim(resolver: TaskResolver) -> None:
    body = {"messages": [{"role": "user", "content": FIM_PROMPTS["qwen"]}], "max_tokens": 9}
    res = resolver.resolve("chat", header=None, model="m", max_tokens=9, body=body)
    assert res.task.name == "code_generation"


def test_header_and_alias_still_win_over_fim(resolver: TaskResolver) -> None:
    body = {"prompt": FIM_PROMPTS["qwen"]}
    res = resolver.resolve("completions", header="code_qna", model="m", max_tokens=None, body=body)
    assert res.task.name == "code_qna"
    res = resolver.resolve("completions", header=None, model="chat", max_tokens=None, body=body)
    assert res.task.name == "code_qna"


def test_a_rule_can_ask_for_non_fim_requests() -> None:
    cfg = load_gateway_config(
        env={},
        overrides={
            "rules": [
                {"endpoint": "completions", "fim": False, "task": "code_summary"},
                {"endpoint": "completions", "fim": True, "task": "code_completion"},
            ]
        },
    )
    resolver = TaskResolver(cfg)
    plain = {"prompt": "x"}
    fim = {"prompt": "x", "suffix": "y"}
    for body, task in ((plain, "code_summary"), (fim, "code_completion")):
        res = resolver.resolve("completions", header=None, model=None, max_tokens=None, body=body)
        assert res.task.name == task
