"""Token counting as a stream passes, and the two usage shapes (vLLM, llama.cpp)."""

from __future__ import annotations

import json

from saber import wire
from saber.gateway.exchange.meter import StreamMeter


def chunk(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode()


def chat_delta(text: str, finish: str | None = None, **extra: object) -> bytes:
    return chunk(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
            **extra,
        }
    )


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
VLLM_STREAM = [
    chat_delta("a"),
    chat_delta("b"),
    chat_delta("c", "stop"),
    chunk({"object": "chat.completion.chunk", "choices": [], "usage": USAGE}),
    b"data: [DONE]",
]
LLAMACPP_STREAM = [
    chunk({"choices": [{"index": 0, "text": "a", "finish_reason": None}]}),
    chunk({"choices": [{"index": 0, "text": "b", "finish_reason": None}]}),
    chunk({"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": USAGE}),
    b"data: [DONE]",
]


def run(meter: StreamMeter, events: list[bytes]) -> list[bytes]:
    out = []
    for e in events:
        forwarded = meter.process(e)
        if forwarded is not None:
            out.append(forwarded)
    return out


def test_vllm_usage_chunk_dropped_when_not_asked() -> None:
    meter = StreamMeter(want_usage=False)
    out = run(meter, VLLM_STREAM)
    assert out == [*VLLM_STREAM[:3], b"data: [DONE]"]
    assert meter.tokens == 3 and meter.usage_tokens == 3 and meter.done


def test_vllm_usage_chunk_kept_when_asked() -> None:
    meter = StreamMeter(want_usage=True)
    assert run(meter, VLLM_STREAM) == VLLM_STREAM
    assert meter.tokens == 3


def test_usage_on_a_finishing_chunk_is_removed_where_the_gateway_asked_for_it() -> None:
    # The kind is vLLM's (or unknown, served as vLLM): such usage is the gateway's doing.
    meter = StreamMeter(want_usage=False)
    out = run(meter, LLAMACPP_STREAM)
    assert len(out) == 4  # no chunk dropped
    last = json.loads(out[2][len(b"data: ") :])
    assert "usage" not in last
    assert last["choices"][0]["finish_reason"] == "length"
    assert meter.usage_tokens == 3 and meter.chunks == 2


def test_llamacpp_usage_kept_when_asked() -> None:
    meter = StreamMeter(want_usage=True)
    assert run(meter, LLAMACPP_STREAM) == LLAMACPP_STREAM


def test_llamacpp_completion_usage_stays_on_its_chunk() -> None:
    # llama.cpp's /v1/completions puts it there asked or not: the client would see it.
    meter = StreamMeter(want_usage=False, keep_choice_usage=True)
    assert run(meter, LLAMACPP_STREAM) == LLAMACPP_STREAM
    assert meter.usage_tokens == 3 and meter.chunks == 2


def test_llamacpp_chat_usage_chunk_dropped_when_not_asked() -> None:
    # llama.cpp's chat stream: usage (and timings) in a chunk of its own, only when asked.
    timings = {"predicted_n": 3, "predicted_per_second": 511.9}
    usage_chunk = chunk({"choices": [], "usage": USAGE, "timings": timings})
    stream = [*VLLM_STREAM[:3], usage_chunk, b"data: [DONE]"]
    meter = StreamMeter(want_usage=False, keep_choice_usage=True)
    assert run(meter, stream) == [*VLLM_STREAM[:3], b"data: [DONE]"]
    assert meter.usage_tokens == 3


def test_tokens_counted_from_deltas_without_usage() -> None:
    meter = StreamMeter(want_usage=False)
    run(meter, [chat_delta(""), chat_delta("x"), chat_delta("y"), b"data: [DONE]"])
    assert meter.usage_tokens is None and meter.tokens == 2 and meter.first_token


def test_null_usage_on_every_chunk_passes_untouched() -> None:
    event = chat_delta("x", usage=None)
    assert StreamMeter(want_usage=False).process(event) == event


def test_error_events_pass_in_openai_shape_and_comments_as_they_came() -> None:
    meter = StreamMeter(want_usage=False)
    vllm = chunk({"error": {"message": "boom", "type": "BadRequestError", "code": 400}})
    out = json.loads(wire.data_field(meter.process(vllm) or b"") or "")
    assert meter.error["message"] == "boom" and wire.is_openai_error(out)
    assert out["error"] == {
        "message": "boom",
        "type": "invalid_request_error",
        "param": None,
        "code": "backend_error",
    }
    assert meter.process(b": ping") == b": ping"
    assert meter.process(b"data: not json") == b"data: not json"


def test_reasoning_and_tool_calls_are_generated_tokens() -> None:
    meter = StreamMeter(want_usage=False)
    opening = chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    meter.process(opening)
    assert not meter.first_token
    for delta in (
        {"reasoning_content": "think"},
        {"reasoning": "more"},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
    ):
        meter.process(chunk({"choices": [{"index": 0, "delta": delta}]}))
    assert meter.first_token and meter.tokens == 3


def test_a_chunk_json_reads_but_strict_parsers_refuse_is_counted_all_the_same() -> None:
    """A logprob of -Infinity (Python's json writes it, a strict parser refuses it):
    the chunk is still counted, and passes as it came; a chunk that is not JSON passes
    uncounted."""
    meter = StreamMeter(want_usage=False)
    infinite = b'data: {"choices":[{"index":0,"delta":{"content":"a"},"logprobs":-Infinity}]}'
    assert meter.process(infinite) == infinite
    broken = b'data: {"choices":[{"index":0,"delta":{"content":"b"}'
    assert meter.process(broken) == broken
    assert meter.chunks == 1
