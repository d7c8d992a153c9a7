"""``POST /v1/embeddings``: deterministic vectors in OpenAI's shape, with usage.

Each input (a string, a list of strings, a list of token ids or a list of such lists,
as OpenAI and vLLM take them) gets a unit vector drawn from a generator seeded by its
text (or ids), so the same input always gets the same vector and different inputs
different ones: enough for a client's codebase index to be built and searched against
saber-sim. ``dimensions`` sets the length (default ``DIMENSIONS``);
``encoding_format`` ``base64`` sends each vector as little-endian float32 bytes, as
the ``openai`` SDK asks by default. Answered at once: embeddings take no engine time
here (vLLM serves them from a pooling model, not the one that generates).
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from http import HTTPStatus
from typing import Any

import numpy as np

from saber import wire
from saber.sim.http.lengths import completion_prompts
from saber.sim.http.responses.errors import ApiError

DIMENSIONS = 384
MAX_DIMENSIONS = 4096


def embeddings(body: dict[str, Any], models: tuple[str, ...]) -> dict[str, Any]:
    """The answer to one embeddings request; ApiError (400, or 404 for an unknown model)."""
    model = body.get("model")
    if model is not None and model not in models:
        raise ApiError(f"The model `{model}` does not exist.", HTTPStatus.NOT_FOUND, param="model")
    items = _inputs(body.get("input"))
    dims = body.get("dimensions", DIMENSIONS)
    if dims is None:
        dims = DIMENSIONS
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_DIMENSIONS:
        raise ApiError(
            f"dimensions must be an integer from 1 to {MAX_DIMENSIONS}.", param="dimensions"
        )
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise ApiError("encoding_format must be 'float' or 'base64'.", param="encoding_format")
    data = []
    tokens = 0
    for index, (key, count) in enumerate(items):
        vector = vector_for(key, dims)
        tokens += count
        shown: Any = vector.tolist()
        if encoding == "base64":
            shown = base64.b64encode(vector.astype("<f4").tobytes()).decode()
        data.append({"object": "embedding", "index": index, "embedding": shown})
    return {
        "id": f"embd-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": model or models[0],
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }


def vector_for(key: str, dims: int) -> np.ndarray:
    """The unit vector of one input: the same for the same text (or ids) and length."""
    digest = hashlib.blake2b(f"{dims}\x00{key}".encode(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    vector = rng.standard_normal(dims).astype(np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def _inputs(raw: Any) -> list[tuple[str, int]]:
    """(text that seeds the vector, its tokens) for each input."""
    if isinstance(raw, str):
        ok = True
    elif isinstance(raw, list) and raw:
        ok = all(isinstance(x, str) for x in raw) or wire.is_token_ids(raw)
        ok = ok or all(isinstance(x, list) and wire.is_token_ids(x) for x in raw)
    else:
        ok = False
    if not ok:
        raise ApiError(
            "input must be a string, a list of strings, a list of token ids or a list of "
            "lists of token ids, and not empty.",
            param="input",
        )
    return [(p.text, p.tokens) for p in completion_prompts(raw)]
