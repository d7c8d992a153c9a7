"""The step-time model: a roofline over weights, KV cache and FLOPs, and the presets."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from saber.engine import (
    HARDWARE,
    MODELS,
    PRESETS,
    Engine,
    EnginePreset,
    EngineRequest,
    UnknownPresetError,
    get_preset,
)

A10_3B = get_preset("a10-qwen2.5-coder-3b")


def test_per_request_speed_falls_and_throughput_rises_with_batch():
    speeds = [A10_3B.decode_speed(b, context=800) for b in (1, 2, 8, 32, 64, 128, 256)]
    assert all(a > b for a, b in itertools.pairwise(speeds))
    throughput = [s * b for s, b in zip(speeds, (1, 2, 8, 32, 64, 128, 256), strict=True)]
    assert all(a < b for a, b in itertools.pairwise(throughput))


def test_longer_contexts_slow_decoding():
    assert A10_3B.decode_speed(32, context=2000) < A10_3B.decode_speed(32, context=200)


def test_prefill_lengthens_the_step():
    decode = A10_3B.step_time(num_seqs=16, tokens=16, context_tokens=16 * 500)
    with_prefill = A10_3B.step_time(
        num_seqs=17, tokens=16 + 1000, context_tokens=16 * 500 + 1000, attn_pairs=16 * 500 + 500500
    )
    assert with_prefill > 2 * decode


def test_small_batch_decode_is_memory_bound_and_big_prefill_compute_bound():
    p = A10_3B
    memory_only = p.model.weight_bytes / (p.hardware.memory_bandwidth * p.memory_efficiency)
    overhead = p.step_overhead_s + p.seq_overhead_s
    one = p.step_time(num_seqs=1, tokens=1, context_tokens=100)
    assert one == pytest.approx(overhead + memory_only, rel=0.01)
    flops = 2 * p.model.n_params * 2000 / (p.hardware.peak_flops * p.mfu)
    big = p.step_time(num_seqs=1, tokens=2000, context_tokens=2000, attn_pairs=0)
    assert big == pytest.approx(overhead + flops)


def test_faster_hardware_is_faster():
    names = ["l4", "a10", "a100-40gb", "h100"]
    speeds = [get_preset(f"{hw}-qwen2.5-coder-7b").decode_speed(32, 800) for hw in names]
    assert speeds == sorted(speeds)


def test_kv_bytes_per_token_follow_the_model_shape():
    # 2 (K, V) * layers * kv heads * head_dim * 2 bytes
    assert MODELS["qwen2.5-coder-1.5b"].kv_bytes_per_token == 2 * 28 * 2 * 128 * 2
    assert MODELS["qwen2.5-coder-3b"].kv_bytes_per_token == 2 * 36 * 2 * 128 * 2
    assert MODELS["qwen2.5-coder-7b"].kv_bytes_per_token == 2 * 28 * 4 * 128 * 2


def test_kv_capacity_comes_from_memory_left_after_weights():
    p = A10_3B
    free = 24e9 * 0.9 - 3.09e9 * 2 - p.activation_reserve_bytes
    assert p.kv_capacity_tokens == int(free // (2 * 36 * 2 * 128 * 2))
    assert get_preset("a10-qwen2.5-coder-7b").kv_capacity_tokens < p.kv_capacity_tokens
    explicit = dataclasses.replace(p, kv_capacity=4096)
    assert explicit.kv_capacity_tokens == 4096
    assert Engine(p, kv_capacity_tokens=1600).num_blocks == 100


def test_a_model_too_big_for_the_card_is_refused():
    with pytest.raises(ValueError, match="no memory"):
        EnginePreset(
            "x", HARDWARE["l4"], dataclasses.replace(MODELS["qwen2.5-coder-7b"], n_params=12e9)
        )


def test_presets_cover_every_card_and_model_and_paper():
    for hw in ("a10", "l4", "a100-40gb", "h100", "ascend-910b"):
        for model in ("qwen2.5-coder-1.5b", "qwen2.5-coder-3b", "qwen2.5-coder-7b"):
            assert PRESETS[f"{hw}-{model}"].hardware.name == hw
    assert "paper" in PRESETS
    assert get_preset("paper") is PRESETS["paper"]


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UnknownPresetError) as err:
        get_preset("tpu-v9")
    message = str(err.value)
    assert "tpu-v9" in message and "paper" in message and "h100-qwen2.5-coder-7b" in message
    assert isinstance(err.value, KeyError)


def test_batch_of_equal_requests_each_run_slower_than_one_alone():
    def finish_time(batch: int) -> float:
        engine = Engine(A10_3B)
        for i in range(batch):
            engine.add(EngineRequest(f"r{i}", prompt_tokens=200, output_tokens=100))
        now = 0.0
        while (res := engine.step(now, max_steps=1000)) is not None:
            now = res.end
        return now

    alone, crowd = finish_time(1), finish_time(64)
    assert crowd > alone * 1.1
    assert 64 * 100 / crowd > 100 / alone * 10  # but far more throughput
