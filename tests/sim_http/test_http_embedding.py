"""The embedding helpers other tests use: in a thread, or in the running event loop."""

from __future__ import annotations

import httpx
import openai

from saber.sim.http import SimSettings, serve, serve_in_thread


async def test_serve_in_the_running_loop() -> None:
    async with serve(SimSettings(time_scale=20), served_model_name=("tiny",)) as sim:
        assert sim.url.startswith("http://127.0.0.1:") and sim.port > 0
        assert sim.api_url == f"{sim.url}/v1"
        async with openai.AsyncOpenAI(base_url=sim.api_url, api_key="x", max_retries=0) as client:
            out = await client.completions.create(model="tiny", prompt="x", max_tokens=2)
        assert out.model == "tiny"


def test_two_servers_side_by_side() -> None:
    with serve_in_thread(time_scale=20) as a, serve_in_thread(time_scale=20, max_num_seqs=1) as b:
        assert a.port != b.port
        for sim in (a, b):
            assert httpx.get(f"{sim.url}/health").status_code == 200
        assert b.state.engine.max_num_seqs == 1


def test_a_taken_port_fails_loudly() -> None:
    with serve_in_thread(time_scale=20) as a:
        try:
            with serve_in_thread(port=a.port):
                raise AssertionError("started twice on one port")
        except RuntimeError as exc:
            assert str(a.port) in str(exc)
