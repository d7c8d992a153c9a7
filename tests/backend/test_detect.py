"""detect_kind, describe and fetch_load against a real saber-sim and small real
servers that answer the probes as vLLM and llama.cpp do."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fake_engines import (
    BUILD_INFO,
    VLLM_VERSION,
    bare_app,
    llamacpp_app,
    serve_app,
    vllm_app,
)

from harness import free_port
from saber import __version__
from saber.backend import (
    BackendError,
    BackendInfo,
    BackendKind,
    BackendLoad,
    describe,
    detect_kind,
    fetch_load,
)
from saber.sim.http import RunningSim, serve_in_thread


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    with serve_in_thread(time_scale=20.0, max_num_seqs=4) as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5.0) as c:
        yield c


async def test_saber_sim_is_told_from_vllm(sim: RunningSim, client: httpx.AsyncClient) -> None:
    # Its model cards say vLLM; only /version tells.
    card = (await client.get(sim.api_url + "/models")).json()["data"][0]
    assert card["owned_by"] == "vllm"
    assert await detect_kind(client, sim.url) is BackendKind.SIM
    assert await detect_kind(client, sim.url + "/") is BackendKind.SIM
    info = await describe(client, sim.url)
    assert info == BackendInfo(BackendKind.SIM, __version__, [sim.model])


async def test_saber_sim_load(sim: RunningSim, client: httpx.AsyncClient) -> None:
    idle = BackendLoad(0.0, 0.0, ttft_sum=0.0, ttft_count=0.0)  # no first token yet
    assert await fetch_load(client, sim.url, BackendKind.SIM) == idle
    body = {"model": sim.model, "prompt": "x", "max_tokens": 20_000, "ignore_eos": True}
    async with httpx.AsyncClient(timeout=10) as direct, contextlib.AsyncExitStack() as open_:
        for _ in range(6):
            resp = await open_.enter_async_context(
                direct.stream("POST", sim.api_url + "/completions", json={**body, "stream": True})
            )
            assert resp.status_code == 200
        load = await fetch_load(client, sim.url, BackendKind.SIM)
        assert (load.running, load.waiting) == (4.0, 2.0)  # max_num_seqs=4
        assert load.ttft_count is not None and load.ttft_count <= 4  # only the running


async def test_llamacpp(client: httpx.AsyncClient) -> None:
    with serve_app(llamacpp_app()) as url:
        assert await detect_kind(client, url) is BackendKind.LLAMACPP
        info = await describe(client, url)
        assert info == BackendInfo(BackendKind.LLAMACPP, BUILD_INFO, ["tiny-gguf"])
        assert await describe(client, url, BackendKind.LLAMACPP) == info
        assert await fetch_load(client, url, BackendKind.LLAMACPP) == BackendLoad(32.0, 5.0)
        with pytest.raises(BackendError, match=r"no vllm:num_requests_running .* vllm backend"):
            await fetch_load(client, url, BackendKind.VLLM)


async def test_llamacpp_without_owned_by_is_found_by_props(client: httpx.AsyncClient) -> None:
    with serve_app(llamacpp_app(owned_by=None, metrics=False)) as url:
        assert await detect_kind(client, url) is BackendKind.LLAMACPP
        with pytest.raises(BackendError) as err:
            await fetch_load(client, url, BackendKind.LLAMACPP)
        message = str(err.value)
        assert f"{url}/metrics" in message and "501" in message and "--metrics" in message


async def test_llamacpp_with_an_api_key(client: httpx.AsyncClient) -> None:
    with serve_app(llamacpp_app(api_key="k")) as url:
        with pytest.raises(BackendError, match=r"401.*Invalid API Key"):
            await fetch_load(client, url, BackendKind.LLAMACPP)
        async with httpx.AsyncClient(headers={"authorization": "Bearer k"}) as authed:
            info = await describe(authed, url)
            assert info.kind is BackendKind.LLAMACPP and info.version == BUILD_INFO
            assert (await fetch_load(authed, url, BackendKind.LLAMACPP)).running == 32.0


async def test_vllm(client: httpx.AsyncClient) -> None:
    with serve_app(vllm_app()) as url:
        assert await detect_kind(client, url) is BackendKind.VLLM
        info = await describe(client, url)
        assert info == BackendInfo(BackendKind.VLLM, VLLM_VERSION, ["tiny-llama"])
        load = await fetch_load(client, url, BackendKind.VLLM)
        assert load == BackendLoad(5.0, 4.0, ttft_sum=2.71828, ttft_count=32.0)


async def test_vllm_by_version_alone_and_by_metrics_alone(client: httpx.AsyncClient) -> None:
    with serve_app(vllm_app(owned_by=None)) as url:
        assert await detect_kind(client, url) is BackendKind.VLLM
    with serve_app(vllm_app(owned_by=None, version=False)) as url:
        assert await detect_kind(client, url) is BackendKind.VLLM
        assert (await describe(client, url)).version is None


async def test_an_unknown_engine_is_an_error_that_says_what_was_seen(
    client: httpx.AsyncClient,
) -> None:
    with serve_app(bare_app()) as url, pytest.raises(BackendError) as err:
        await detect_kind(client, url)
    message = str(err.value)
    assert url in message and "owned_by: someone" in message and "/metrics: 404" in message


async def test_unreachable_is_an_error_that_names_the_url(client: httpx.AsyncClient) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for probe in (detect_kind(client, url), describe(client, url, BackendKind.VLLM)):
        with pytest.raises(BackendError, match=f"cannot reach {url}/"):
            await probe
    with pytest.raises(BackendError, match=f"cannot reach {url}/metrics"):
        await fetch_load(client, url, BackendKind.LLAMACPP)
