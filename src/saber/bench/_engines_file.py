"""Engine presets from a YAML file, for engines the project does not ship
(``saber-bench matrix --engines-file``): held-out engines checked without code changes.

The file is a list; each entry names its engine, an accelerator and a model, each
either a known name (``saber.engine.HARDWARE``, ``MODELS``) or a full spec, and any
``EnginePreset`` factor::

    - name: mi300x-qwen2.5-coder-7b
      hardware: {memory_gb: 192, bandwidth_gbs: 5300, tflops: 1307}
      model: qwen2.5-coder-7b
      memory_efficiency: 0.7
    - name: a10-qwen2.5-coder-14b
      hardware: a10
      model: {n_params: 14.7e9, n_layers: 48, hidden_size: 5120, n_kv_heads: 8, head_dim: 128}
      kv_capacity: 20000
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from saber.config import ConfigError, read_yaml, validate
from saber.engine import HARDWARE, MODELS, PRESETS, EnginePreset, Hardware, ModelSpec

GB = 1e9
T = TypeVar("T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareSpec(_Strict):
    memory_gb: float = Field(gt=0)
    bandwidth_gbs: float = Field(gt=0, description="memory bandwidth, GB/s")
    tflops: float = Field(gt=0, description="dense bf16/fp16 peak, TFLOP/s")


class ModelShape(_Strict):
    n_params: float = Field(gt=0)
    n_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    n_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    dtype_bytes: int = Field(default=2, ge=1)


class EngineEntry(_Strict):
    name: str = Field(min_length=1)
    hardware: str | HardwareSpec
    model: str | ModelShape
    memory_efficiency: float | None = Field(default=None, gt=0, le=1)
    mfu: float | None = Field(default=None, gt=0, le=1)
    step_overhead_s: float | None = Field(default=None, ge=0)
    seq_overhead_s: float | None = Field(default=None, ge=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    activation_reserve_bytes: float | None = Field(default=None, ge=0)
    kv_capacity: int | None = Field(default=None, ge=1)
    notes: str | None = None


def load_engines(path: str | Path) -> dict[str, EnginePreset]:
    """The presets ``path`` defines, by name. A ConfigError names the file, the entry
    and what is wrong: not a list, a bad field, an unknown accelerator or model, a name
    taken twice or by a shipped preset, a model that leaves no room for a KV cache."""
    data = read_yaml(path)
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: expected a non-empty YAML list of engines")
    out: dict[str, EnginePreset] = {}
    for i, item in enumerate(data, 1):
        name = item.get("name") if isinstance(item, dict) else None
        where = f"{path}, engine {i}" + (f" ({name})" if isinstance(name, str) else "")
        entry = validate(EngineEntry, item, where)
        if entry.name in PRESETS or entry.name in out:
            raise ConfigError(f"{where}: the name {entry.name!r} is already an engine preset")
        out[entry.name] = _preset(entry, where)
    return out


def engines_with(path: str | Path | None) -> dict[str, EnginePreset]:
    """Every shipped preset, and those ``path`` defines (none without a path)."""
    return {**PRESETS, **(load_engines(path) if path else {})}


def _preset(entry: EngineEntry, where: str) -> EnginePreset:
    factors = entry.model_dump(exclude={"name", "hardware", "model"}, exclude_none=True)
    hardware, model = _hardware(entry, where), _model(entry, where)
    try:
        return EnginePreset(name=entry.name, hardware=hardware, model=model, **factors)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _hardware(entry: EngineEntry, where: str) -> Hardware:
    hw = entry.hardware
    if isinstance(hw, str):
        return _known(HARDWARE, hw, "hardware", "memory_gb, bandwidth_gbs, tflops", where)
    return Hardware(entry.name, hw.memory_gb * GB, hw.bandwidth_gbs * GB, hw.tflops * 1e12)


def _model(entry: EngineEntry, where: str) -> ModelSpec:
    model = entry.model
    if isinstance(model, str):
        spec = "n_params, n_layers, hidden_size, n_kv_heads, head_dim"
        return _known(MODELS, model, "model", spec, where)
    return ModelSpec(entry.name, **model.model_dump())


def _known(table: Mapping[str, T], name: str, what: str, spec: str, where: str) -> T:
    if name not in table:
        known = ", ".join(table)
        raise ConfigError(f"{where}: unknown {what} {name!r}; known: {known}, or a spec {{{spec}}}")
    return table[name]
