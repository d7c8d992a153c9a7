"""Datasheet figures for accelerators and the models served on them.

Only public numbers live here; how they combine into a step time is in
``_preset.py``. Peak FLOPS are dense (no sparsity) BF16/FP16 tensor-core figures.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
GiB = 1024**3


@dataclass(frozen=True, slots=True)
class Hardware:
    """One accelerator: memory size, memory bandwidth and peak matmul throughput."""

    name: str
    memory_bytes: float
    memory_bandwidth: float  # bytes/s
    peak_flops: float  # dense bf16/fp16 FLOP/s
    source: str = ""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The parts of a decoder-only transformer's shape that set its serving cost."""

    name: str
    n_params: float
    n_layers: int
    hidden_size: int  # = query heads * head_dim for the Qwen2.5 family
    n_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # bf16
    source: str = ""

    @property
    def weight_bytes(self) -> float:
        return self.n_params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head (grouped-query attention)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


# NVIDIA datasheets: A10 (24 GB GDDR6, 600 GB/s, BF16 125 TFLOPS dense);
# L4 (24 GB GDDR6, 300 GB/s, BF16 121 TFLOPS dense);
# A100 SXM 40GB (HBM2, 1,555 GB/s) and 80GB (HBM2e, 2,039 GB/s), BF16 312 TFLOPS;
# H100 SXM (80 GB HBM3, 3.35 TB/s, BF16 989 TFLOPS dense).
# Ascend 910B: Huawei publishes no full datasheet; 64 GB HBM2e, ~1.6 TB/s and
# ~280 TFLOPS FP16 are the commonly quoted third-party figures (approximate).
HARDWARE: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware("a10", 24 * GB, 600 * GB, 125e12, "NVIDIA A10 datasheet"),
        Hardware("l4", 24 * GB, 300 * GB, 121e12, "NVIDIA L4 datasheet"),
        Hardware("a100-40gb", 40 * GB, 1555 * GB, 312e12, "NVIDIA A100 datasheet (SXM 40GB)"),
        Hardware("a100-80gb", 80 * GB, 2039 * GB, 312e12, "NVIDIA A100 datasheet (SXM 80GB)"),
        Hardware("h100", 80 * GB, 3350 * GB, 989e12, "NVIDIA H100 datasheet (SXM)"),
        Hardware("ascend-910b", 64 * GB, 1600 * GB, 280e12, "third-party figures, approximate"),
    )
}

# Qwen2.5-Coder model cards and config.json on Hugging Face (Qwen2.5-Coder
# technical report, arXiv:2409.12186): layers, hidden size, query/KV heads.
_QWEN = "Qwen2.5-Coder model card / config.json"
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("qwen2.5-coder-1.5b", 1.54e9, 28, 1536, 2, 128, source=_QWEN),
        ModelSpec("qwen2.5-coder-3b", 3.09e9, 36, 2048, 2, 128, source=_QWEN),
        ModelSpec("qwen2.5-coder-7b", 7.61e9, 28, 3584, 4, 128, source=_QWEN),
    )
}
