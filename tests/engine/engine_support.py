"""Checks the engine tests share."""

from __future__ import annotations

from saber.engine import BLOCK_SIZE, Engine


def check_kv(engine: Engine) -> None:
    """Held blocks match what running requests need, and nothing leaks."""
    held = 0
    for rid in engine.running_ids:
        req = engine.get(rid)
        assert req is not None
        assert req.blocks == -(-req.computed // BLOCK_SIZE)
        held += req.blocks
    for rid in engine.waiting_ids:
        req = engine.get(rid)
        assert req is not None and req.blocks == 0 and req.computed == 0
    assert held == engine.num_blocks - engine._free
