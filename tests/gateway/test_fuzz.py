"""Property-based fuzzing of the edge (hypothesis): any body, any header, any size.

Whatever a client sends to either completion route over valid HTTP, the gateway
answers a 4xx with an OpenAI error body or a correct answer; never a 500; a refused
request changes nothing in the scheduler (no offer reaches it); every request is
counted exactly once; and what goes upstream is strict JSON. The bodies are
plausible requests with every field the gateway or an engine reads set to anything
JSON (or Python's JSON: NaN, Infinity, 1e400, integers of thousands of digits),
random JSON, random bytes, truncations, deep nesting and sizes around the body
limit; the headers are random task names, keys, content types and others.

The schema-driven alternative (schemathesis over an OpenAPI document) was not taken:
the gateway relays bodies it does not model (unknown fields pass through), so its
OpenAPI document would describe a few fields and the generator would explore little
else, and serving that document would tell anyone the routes. ``openapi_url`` stays
off. The number of cases run is printed (``pytest -s``) and checked.
"""

from __future__ import annotations

import json
import string
from typing import Any

import httpx
import pytest
from fake_vllm import MODEL, FakeVllm
from gateway_support import GatewayFactory, requests_total, start_fake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saber import wire
from saber.gateway import RunningGateway

EXAMPLES = 1000  # per property; three properties
KEY = "sk-fuzz"
EDITOR = {"name": "editor", "key": "sk-editor", "tasks": ["code_completion"], "max_tokens": 32}
TASKS = ["code_qna", "code_generation", "code_summary", "code_translation", "code_completion"]
NUMBERS = [
    "max_tokens", "max_completion_tokens", "min_tokens", "n", "best_of", "logprobs",
    "top_logprobs", "prompt_logprobs", "temperature", "top_p", "min_p", "top_k",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "priority",
    "truncate_prompt_tokens", "n_predict", "logit_bias", "stream", "stream_options", "model",
    "messages", "prompt",
]  # fmt: skip
ALLOWED = {200, 400, 401, 403, 408, 413}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([0, 1, -1, 2**24, 2**24 + 1, 2**31, 2**63, 2**64, 20, 21, 128, 129]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "\x00", "x" * 200]),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def encode(value: Any) -> bytes:
    """Python's JSON, NaN and Infinity included; lone surrogates as \\u escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode()


@st.composite
def plausible(draw: st.DrawFn) -> tuple[str, bytes]:
    """An OpenAI-like request with fields set to anything."""
    chat = draw(st.booleans())
    body: dict[str, Any] = {"model": draw(st.sampled_from([MODEL, "chat", f"{MODEL}:code_qna"]))}
    if chat:
        body["messages"] = [{"role": "user", "content": draw(st.text(max_size=20))}]
    else:
        body["prompt"] = draw(st.one_of(st.text(max_size=20), st.lists(st.integers(), max_size=3)))
    for name in draw(st.lists(st.sampled_from(NUMBERS), max_size=5, unique=True)):
        body[name] = draw(json_values)
    raw = encode(body)
    cut = draw(st.sampled_from([None, None, None, "truncate", "pad", "huge-int"]))
    if cut == "truncate":
        raw = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif cut == "pad":  # around the body limit (8 KiB)
        size = draw(st.integers(0, 12_000))
        raw = raw[:-1] + b', "pad": "' + b"x" * size + b'"}'
    elif cut == "huge-int":
        raw = raw[:-1] + b', "n": 1' + b"0" * draw(st.integers(300, 5000)) + b"}"
    return ("/v1/chat/completions" if chat else "/v1/completions"), raw


@st.composite
def anything(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
    kind = draw(st.sampled_from(["json", "bytes", "deep", "text"]))
    if kind == "json":
        raw = encode(draw(json_values))
    elif kind == "bytes":
        raw = draw(st.binary(max_size=300))
    elif kind == "deep":
        depth = draw(st.integers(100, 20_000))
        open_, close = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        raw = b'{"prompt": ' + open_ * depth + b"1" + close * depth + b"}"
    else:
        raw = draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    return path, raw


# What valid HTTP carries (h11, the client, refuses the rest): no control characters,
# no leading or trailing blanks.
header_text = st.text(alphabet=string.printable.strip("\r\n\x0b\x0c"), max_size=30).map(
    lambda text: text.strip(" \t")
)
header_name = st.text(
    alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=12
)


@st.composite
def headers(draw: st.DrawFn) -> dict[str, str]:
    out: dict[str, str] = {}
    auth = draw(st.sampled_from(["good", "good", "good", "editor", "bad", "none", "junk"]))
    if auth == "good":
        out["authorization"] = f"Bearer {KEY}"
    elif auth == "editor":
        out["authorization"] = f"Bearer {EDITOR['key']}"
    elif auth == "bad":
        out["authorization"] = "Bearer sk-wrong"
    elif auth == "junk":
        out["authorization"] = draw(header_text)
    if draw(st.booleans()):
        out["x-saber-task"] = draw(st.one_of(st.sampled_from(TASKS), header_text))
    if draw(st.booleans()):
        out["content-type"] = draw(
            st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"])
        )
    for name in draw(st.lists(header_name, max_size=3)):
        if name not in ("content-length", "host", "transfer-encoding", "connection", "expect"):
            out[name] = draw(header_text)
    for name in ("x-forwarded-for", "forwarded", "via", "cookie"):
        if draw(st.booleans()):
            out[name] = draw(header_text)
    return out


class Edge:
    """Sends one case and checks the properties; counts the cases it ran."""

    def __init__(self, gw: RunningGateway, fake: FakeVllm) -> None:
        self.gw, self.fake = gw, fake
        self.client = httpx.Client(base_url=gw.url, timeout=10)
        self.cases = 0
        self.statuses: dict[int, int] = {}

    def check(self, path: str, raw: bytes, sent: dict[str, str]) -> None:
        g = self.gw.gateway
        trace = g.admission.trace
        assert trace is not None
        offers_before = sum(1 for e in trace if e.call == "offer")
        counted_before = requests_total(self.gw)
        resp = self.client.post(path, content=raw, headers=sent)
        self.cases += 1
        self.statuses[resp.status_code] = self.statuses.get(resp.status_code, 0) + 1
        assert resp.status_code in ALLOWED, (resp.status_code, resp.text[:300], raw[:200])
        offers = sum(1 for e in trace if e.call == "offer") - offers_before
        if resp.status_code == 200:
            assert offers == 1
            if resp.headers["content-type"].startswith("text/event-stream"):
                lines = [line for line in resp.text.split("\n") if line]
                assert lines[-1] == "data: [DONE]"
            else:
                assert resp.json()["choices"]
        else:
            assert wire.is_openai_error(resp.json()), resp.text[:300]
            assert offers == 0  # the scheduler never saw it
        assert requests_total(self.gw) == counted_before + 1
        s = g.scheduler
        assert s.load == 0 and s.queued() == 0 and g.admission.active == 0
        assert self.fake.bad_json == 0


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.slow
def test_fuzz_the_edge(gateway_factory: GatewayFactory, capsys: Any) -> None:
    fake = FakeVllm()
    gw = start_fake(
        gateway_factory,
        fake,
        trace=True,
        api_keys=[KEY, EDITOR],
        max_body_bytes=8192,
        log_requests=False,
    )
    edge = Edge(gw, fake)

    @FUZZ
    @given(case=plausible(), sent=headers())
    def plausible_requests(case: tuple[str, bytes], sent: dict[str, str]) -> None:
        edge.check(*case, sent)

    @FUZZ
    @given(case=anything(), sent=headers())
    def any_body(case: tuple[str, bytes], sent: dict[str, str]) -> None:
        edge.check(*case, sent)

    @FUZZ
    @given(
        field=st.sampled_from(NUMBERS[:-3]),
        value=json_values,
        stream=st.booleans(),
        task=st.sampled_from([None, *TASKS]),
    )
    def one_field(field: str, value: Any, stream: bool, task: str | None) -> None:
        body = {"model": MODEL, "prompt": "x", "stream": stream, field: value}
        sent = {"authorization": f"Bearer {KEY}", **({"x-saber-task": task} if task else {})}
        edge.check("/v1/completions", encode(body), sent)

    plausible_requests()
    any_body()
    one_field()
    with capsys.disabled():
        statuses = dict(sorted(edge.statuses.items()))
        print(f"\nfuzz: {edge.cases} cases, all passed; statuses {statuses}")
    assert edge.cases >= 3 * EXAMPLES * 0.9
    assert edge.statuses.get(200, 0) > 50  # the properties held for answers too
