"""Task type resolution: header, alias, rules, default, in that order."""

from __future__ import annotations

import pytest

from saber.config import load_gateway_config
from saber.gateway.errors import GatewayError
from saber.gateway.tasks import BACKEND_MODEL, TaskResolver


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


def test_alias_listing(resolver: TaskResolver) -> None:
    names = dict(resolver.alias_names(["m1"]))
    assert names["autocomplete"] == "m1"
    assert names["m1:code_qna"] == "m1"
    assert resolver.alias_names([]) == []
