"""The physics of one engine step: a roofline over weights, KV cache and FLOPs."""

from __future__ import annotations

from dataclasses import dataclass, field

from saber.engine._specs import GiB, Hardware, ModelSpec

BLOCK_SIZE = 16  # tokens per KV-cache block, vLLM's default


@dataclass(frozen=True)
class EnginePreset:
    """An accelerator, a model, and the factors that turn datasheets into step times.

    A step reads every weight once and the KV cache of every token in the batch's
    context (memory time), and does ``2 * n_params`` FLOPs per processed token plus
    ``4 * n_layers * hidden_size`` per attended (query, key) pair (compute time).
    The step takes ``step_overhead_s + seq_overhead_s * num_seqs`` (scheduling,
    sampling, detokenisation on the CPU) plus the larger of the two: the roofline.
    """

    name: str
    hardware: Hardware
    model: ModelSpec
    memory_efficiency: float = 0.8  # share of peak bandwidth a decode step reaches
    mfu: float = 0.5  # share of peak FLOPS a prefill-heavy step reaches
    step_overhead_s: float = 0.003
    seq_overhead_s: float = 2e-5
    gpu_memory_utilization: float = 0.9  # vLLM's --gpu-memory-utilization
    activation_reserve_bytes: float = 1.5 * GiB  # activations, CUDA graphs, allocator slack
    kv_capacity: int | None = None  # tokens; overrides the memory-derived figure
    notes: str = ""
    _coef: tuple[float, float, float, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (0 < self.memory_efficiency <= 1 and 0 < self.mfu <= 1):
            raise ValueError("memory_efficiency and mfu must be in (0, 1]")
        if self.step_overhead_s < 0 or self.seq_overhead_s < 0:
            raise ValueError("overheads must be >= 0")
        bandwidth = self.hardware.memory_bandwidth * self.memory_efficiency
        flops = self.hardware.peak_flops * self.mfu
        m = self.model
        coef = (
            m.weight_bytes / bandwidth,  # s per step
            m.kv_bytes_per_token / bandwidth,  # s per context token
            2.0 * m.n_params / flops,  # s per processed token
            4.0 * m.n_layers * m.hidden_size / flops,  # s per attended pair
        )
        object.__setattr__(self, "_coef", coef)
        if self.kv_capacity_tokens < BLOCK_SIZE:
            raise ValueError(f"preset {self.name}: the model leaves no memory for a KV cache")

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache size in tokens: explicit, or what vLLM would carve out of memory."""
        if self.kv_capacity is not None:
            return self.kv_capacity
        free = (
            self.hardware.memory_bytes * self.gpu_memory_utilization
            - self.model.weight_bytes
            - self.activation_reserve_bytes
        )
        return max(0, int(free // self.model.kv_bytes_per_token))

    def step_time(
        self,
        *,
        num_seqs: int,
        tokens: int,
        context_tokens: int,
        attn_pairs: int | None = None,
    ) -> float:
        """Seconds for one step.

        ``num_seqs`` requests are in the batch; ``tokens`` are processed (1 per
        decode, the chunk length per prefill); ``context_tokens`` is the sum over
        the batch of tokens in KV after the step (what attention reads);
        ``attn_pairs`` the (query, key) pairs attention computes, by default
        ``context_tokens`` (exact for a pure-decode step).
        """
        if num_seqs <= 0:
            return 0.0
        if attn_pairs is None:
            attn_pairs = context_tokens
        weights, per_ctx, per_token, per_pair = self._coef
        memory = weights + per_ctx * context_tokens
        compute = per_token * tokens + per_pair * attn_pairs
        roofline = memory if memory >= compute else compute
        return self.step_overhead_s + self.seq_overhead_s * num_seqs + roofline

    def decode_speed(self, batch: int, context: int) -> float:
        """Tokens/s each of ``batch`` decoding requests gets, each holding ``context``
        tokens: the offline profile's f(L), ignoring prefill interference."""
        dt = self.step_time(num_seqs=batch, tokens=batch, context_tokens=batch * context)
        return 1.0 / dt
