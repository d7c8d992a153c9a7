"""The official openai SDK, sync and async, streaming and not, works unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest

from saber.sim.http import RunningSim


@pytest.fixture
def client(sim: RunningSim) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.api_url, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture
async def aclient(sim: RunningSim) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=sim.api_url, api_key="unused", max_retries=0) as c:
        yield c


def test_models(client: openai.OpenAI, sim: RunningSim) -> None:
    assert [m.id for m in client.models.list()] == [sim.model]


def test_sync_completion(client: openai.OpenAI, sim: RunningSim) -> None:
    out = client.completions.create(
        model=sim.model, prompt="def f", max_tokens=5, extra_body={"ignore_eos": True}
    )
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and out.usage.completion_tokens == 5
    assert out.usage.prompt_tokens == 2


def test_sync_completion_stream(client: openai.OpenAI, sim: RunningSim) -> None:
    stream = client.completions.create(
        model=sim.model,
        prompt="def f",
        max_tokens=7,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert "".join(c.choices[0].text for c in chunks[:-1]).count(" ") == 6
    assert chunks[-2].choices[0].finish_reason == "length"


def test_sync_chat(client: openai.OpenAI, sim: RunningSim) -> None:
    out = client.chat.completions.create(
        model=sim.model,
        messages=[{"role": "user", "content": "Question about this code: x = 1"}],
        max_completion_tokens=300,
        temperature=0.2,
    )
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.completion_tokens == len(out.choices[0].message.content.split())


def test_sync_chat_stream(client: openai.OpenAI, sim: RunningSim) -> None:
    stream = client.chat.completions.create(
        model=sim.model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 4
    assert chunks[-1].usage.completion_tokens == 4


async def test_async_completion_and_stream(aclient: openai.AsyncOpenAI, sim: RunningSim) -> None:
    out = await aclient.completions.create(
        model=sim.model, prompt="x", max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert out.usage.completion_tokens == 3
    stream = await aclient.completions.create(
        model=sim.model, prompt="x", max_tokens=3, stream=True, extra_body={"ignore_eos": True}
    )
    texts = [c.choices[0].text async for c in stream]
    assert len(texts) == 3


async def test_async_chat_and_stream(aclient: openai.AsyncOpenAI, sim: RunningSim) -> None:
    messages = [{"role": "user", "content": "hi"}]
    out = await aclient.chat.completions.create(
        model=sim.model, messages=messages, max_tokens=2, extra_body={"ignore_eos": True}
    )
    assert out.choices[0].message.content.count(" ") == 1
    stream = await aclient.chat.completions.create(
        model=sim.model, messages=messages, max_tokens=2, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes[-1] == "length"


def test_sdk_raises_the_right_errors(client: openai.OpenAI, sim: RunningSim) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    assert "does not exist" in missing.value.message
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=sim.model, prompt="x", max_tokens=1, n=0)
    assert bad.value.body["param"] == "n"
