"""The wire contract: routes, shapes and errors as vLLM's OpenAI server has them."""

from __future__ import annotations

import json

import httpx
import pytest

from saber.sim.http import RunningSim, SimSettings, create_app
from saber.workload import make_prompt


def _sse(resp: httpx.Response) -> list[str]:
    return [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]


def test_models_health_version(sim: RunningSim) -> None:
    models = httpx.get(f"{sim.api_url}/models").json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == sim.model == "qwen2.5-coder-3b"
    assert card["object"] == "model" and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 4096
    assert httpx.get(f"{sim.url}/health").status_code == 200
    assert httpx.get(f"{sim.url}/version").json()["version"]


def test_completion_stream_frames(sim: RunningSim) -> None:
    body = {
        "model": sim.model,
        "prompt": "a b c",
        "max_tokens": 6,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{sim.api_url}/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        frames = _sse(resp)
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["object"] == "text_completion"
    assert usage["usage"] == {"prompt_tokens": 3, "total_tokens": 9, "completion_tokens": 6}
    tokens = chunks[:-1]
    assert len(tokens) == 6  # one frame per step, one token per decode step
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 5 + ["length"]
    assert len({c["id"] for c in chunks}) == 1
    text = "".join(c["choices"][0]["text"] for c in tokens)
    assert len(text.split()) == 6


def test_chat_stream_opens_with_the_role(sim: RunningSim) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 3,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{sim.api_url}/chat/completions", json=body) as resp:
        frames = _sse(resp)
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(f) for f in frames[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("usage" not in c for c in chunks)  # not asked for
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks).count(" ") == 2


def test_non_streaming_usage_and_natural_stop(sim: RunningSim) -> None:
    prompt = make_prompt("code_summary", 20)
    body = {"prompt": prompt, "max_tokens": 1000}
    first = httpx.post(f"{sim.api_url}/completions", json=body).json()
    again = httpx.post(f"{sim.api_url}/completions", json=body).json()
    choice = first["choices"][0]
    assert first["object"] == "text_completion"
    assert choice["finish_reason"] == "stop"  # ended by itself, well under the cap
    n = first["usage"]["completion_tokens"]
    assert n == len(choice["text"].split()) == again["usage"]["completion_tokens"]  # seeded
    assert first["usage"]["prompt_tokens"] == 20
    capped = httpx.post(f"{sim.api_url}/completions", json={**body, "max_tokens": 2}).json()
    assert capped["choices"][0]["finish_reason"] == "length"
    assert capped["usage"]["completion_tokens"] == 2


def test_several_prompts_are_several_choices(sim: RunningSim) -> None:
    body = {"prompt": ["a", "b c"], "max_tokens": 3, "ignore_eos": True}
    out = httpx.post(f"{sim.api_url}/completions", json=body).json()
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert out["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 9,
        "completion_tokens": 6,
        "prompt_tokens_details": None,
    }


def test_stop_and_min_tokens(sim: RunningSim) -> None:
    body = {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stop": ["self"]}
    out = httpx.post(f"{sim.api_url}/completions", json=body).json()["choices"][0]
    assert out["text"] == "def return " and out["finish_reason"] == "stop"
    assert out["stop_reason"] == "self"
    body = {"prompt": "x", "max_tokens": 5, "min_tokens": 5, "output": "unknown fields pass"}
    out = httpx.post(f"{sim.api_url}/completions", json=body).json()
    assert out["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "max_tokens": 5000}, "max_tokens"),
        ({"prompt": " ".join(["w"] * 4096)}, "input_tokens"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"prompt": 5}, "prompt"),
        ({"max_tokens": 3}, "prompt"),
        ({"prompt": []}, "prompt"),
    ],
)
def test_bad_completion_requests_get_vllm_400s(
    sim: RunningSim, body: dict[str, object], param: str
) -> None:
    resp = httpx.post(f"{sim.api_url}/completions", json=body)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert err["param"] == param or err["param"].startswith(param)
    assert err["message"]


def test_bad_chat_and_bad_json(sim: RunningSim) -> None:
    resp = httpx.post(f"{sim.api_url}/chat/completions", json={"messages": [{"content": "x"}]})
    assert resp.status_code == 400 and resp.json()["error"]["type"] == "BadRequestError"
    resp = httpx.post(f"{sim.api_url}/chat/completions", content=b"{not json")
    assert resp.status_code == 400 and resp.json()["error"]["code"] == 400


def test_unknown_model_is_404(sim: RunningSim) -> None:
    resp = httpx.post(f"{sim.api_url}/completions", json={"model": "gpt-4", "prompt": "x"})
    assert resp.status_code == 404
    assert resp.json() == {
        "error": {
            "message": "The model `gpt-4` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


def test_served_model_aliases() -> None:
    from starlette.testclient import TestClient

    app = create_app(SimSettings(served_model_name=("coder", "alias"), time_scale=50))
    with TestClient(app) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["coder", "alias"]
        out = client.post(
            "/v1/completions", json={"model": "alias", "prompt": "x", "max_tokens": 1}
        )
        assert out.status_code == 200 and out.json()["model"] == "coder"


def test_max_model_len_must_fit_the_kv_cache() -> None:
    with pytest.raises(ValueError, match="KV cache"):
        create_app(SimSettings(kv_capacity_tokens=1024, max_model_len=2048))
