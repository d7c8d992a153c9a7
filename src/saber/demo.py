"""A two-minute tour: saber-sim and saber-gateway in this process, driven by the openai SDK.

    python -m saber.demo

It starts saber-sim (the vLLM stand-in, paper preset) and the gateway on free
127.0.0.1 ports, with the shipped gateway config and the shipped profile, sends
chat and completion requests (streaming and not, different task types), then
prints what the gateway reports about them. Nothing is left running.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from saber.config import ConfigError, load_gateway_config
from saber.gateway import settings_from_config, start_in_thread
from saber.sim.http import serve_in_thread
from saber.speed import ProfileError

TIME_SCALE = 1.0  # real time: the shipped profile describes the sim at this speed


def _headers(raw: Any) -> str:
    h = raw.headers
    return (
        f"task={h['x-saber-task']} outcome={h['x-saber-outcome']} queue={h['x-saber-queue-ms']} ms"
    )


def _short(text: str | None, n: int = 70) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 3] + "..."


def main() -> int:
    started = time.monotonic()
    print("saber demo: saber-sim (paper preset) + saber-gateway, on 127.0.0.1\n")
    with serve_in_thread(time_scale=TIME_SCALE) as sim:
        overrides = {"backend.url": sim.url, "log_requests": False}
        try:  # SABER_PROFILE etc. still apply
            settings = settings_from_config(load_gateway_config(overrides=overrides))
        except (ConfigError, ProfileError) as exc:
            print(f"saber demo: cannot start the gateway: {exc}", file=sys.stderr)
            return 2
        note = " (the shipped default)" if settings.profile_is_default else ""
        print(f"  saber-sim      {sim.url}   model {sim.model}, time scale {TIME_SCALE}")
        with start_in_thread(settings) as gw:
            print(f"  saber-gateway  {gw.url}   profile {settings.profile_path.name}{note}\n")
            client = OpenAI(base_url=gw.url + "/v1", api_key="not-needed", max_retries=0)
            _requests(client, sim.model)
            _burst(client, sim.model)
            _report(gw.url)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


def _requests(client: OpenAI, model: str) -> None:
    chat: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "How do I reverse a list in Python?"}
    ]
    print("1. chat, not streaming, model alias 'chat' (-> code_qna)")
    answer = client.chat.completions.with_raw_response.create(
        model="chat", messages=chat, max_tokens=40
    )
    print(f"   {_headers(answer)}\n   > {_short(answer.parse().choices[0].message.content)}")

    print("2. chat, streaming, header X-Saber-Task: code_generation")
    stream = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Write a binary search."}],
        max_tokens=60,
        stream=True,
        extra_headers={"X-Saber-Task": "code_generation"},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
    print(f"   {_headers(stream)}\n   > {_short(text)}")

    print("3. completion, not streaming, model alias 'autocomplete' (-> code_completion)")
    completion = client.completions.with_raw_response.create(
        model="autocomplete", prompt="def add(a, b):", max_tokens=24
    )
    print(f"   {_headers(completion)}\n   > {_short(completion.parse().choices[0].text)}")

    print("4. completion, streaming, short max_tokens (the rule picks code_completion)")
    chunks = client.completions.with_raw_response.create(
        model=model, prompt="for i in range(", max_tokens=16, stream=True
    )
    text = "".join(c.choices[0].text for c in chunks.parse() if c.choices)
    print(f"   {_headers(chunks)}\n   > {_short(text)}")

    print(f"5. chat, model '{model}:code_summary' (task in the model name)")
    answer = client.chat.completions.with_raw_response.create(
        model=f"{model}:code_summary", messages=chat, max_tokens=30
    )
    print(f"   {_headers(answer)}\n   > {_short(answer.parse().choices[0].message.content)}")


def _burst(client: OpenAI, model: str, n: int = 60) -> None:
    print(f"6. a burst: {n} code_qna requests at once (43 tokens within 1 s each)")
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What does this regex match?"}
    ]

    def one(_: int) -> tuple[str, float]:
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=messages, max_tokens=43, extra_body={"ignore_eos": True}
        )
        return raw.headers["x-saber-outcome"], float(raw.headers["x-saber-queue-ms"])

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(one, range(n)))
    waited = sorted(ms for _, ms in results)
    outcomes = {o: sum(1 for r, _ in results if r == o) for o in sorted({r for r, _ in results})}
    print(f"   outcomes {outcomes}; queue wait min {waited[0]:.0f} ms, max {waited[-1]:.0f} ms")
    print("   (admitted_demoted: held back, then hopeless for its SLA, served best effort)")


def _report(url: str) -> None:
    print("\n/metrics (non-zero saber_requests_total, and the live gauges):")
    for line in httpx.get(url + "/metrics").text.splitlines():
        interesting = line.startswith(
            ("saber_requests_total", "saber_sla_requests_total")
        ) and not line.endswith(" 0.0")
        if interesting or line.startswith(("saber_requests_in_flight", "saber_predicted_speed")):
            print("  ", line)
    status = httpx.get(url + "/saber/status").json()
    speed = status["predicted_speed_tokens_per_s"]
    print("\n/saber/status:")
    f_l, f_next, at = speed["at_load"], speed["at_load_plus_1"], speed["read_at"]
    print(
        f"   load {status['load']}: f({at['at_load']}) {f_l:.1f} tok/s now, "
        f"f({at['at_load_plus_1']}) {f_next:.1f} tok/s with one more request"
    )
    print(f"   ({speed['explain']})")
    p = status["profile"]
    print(f"   profile {p['kind']} {json.dumps(p['params'])} (R^2 {p['r2']:.3f})")
    for d in status["recent_decisions"][-3:]:
        print(f"   decision: {d['action']} {d['id']} task={d['task']} tier={d['tier']}")


if __name__ == "__main__":
    sys.exit(main())
