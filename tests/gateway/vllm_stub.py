"""A vLLM-shaped stub of the routes saber-sim lacks: embeddings, tokenize, detokenize,
pooling, classify, scoring and reranking, with vLLM's bodies and errors. Each answer
can be held for a while, and the stub counts how many it held at once."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse

MODEL = "stub-coder"
MAX_MODEL_LEN = 8192


class Stub:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.in_flight = 0
        self.most_in_flight = 0
        self.seen: list[tuple[str, dict[str, Any], dict[str, str]]] = []  # path, body, headers
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()

        async def held(request: Request) -> dict[str, Any]:
            body = await request.json() if request.method == "POST" else {}
            self.seen.append((request.url.path, body, dict(request.headers)))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.delay_s)
            finally:
                self.in_flight -= 1
            return body

        def unknown(model: object) -> JSONResponse | None:
            if model in (None, MODEL):
                return None
            message = f"The model `{model}` does not exist."
            err = {"message": message, "type": "NotFoundError", "param": "model", "code": 404}
            return JSONResponse({"error": err}, status_code=404)

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            card = {"id": MODEL, "object": "model", "created": 1700000000, "owned_by": "vllm"}
            card |= {"root": "/models/stub", "parent": None, "max_model_len": MAX_MODEL_LEN}
            return {"object": "list", "data": [card]}

        @app.get("/version")
        async def version(request: Request) -> dict[str, str]:
            await held(request)
            return {"version": "0.32.0"}

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {}

        @app.post("/v1/embeddings")
        async def embeddings(request: Request) -> Any:
            body = await held(request)
            if (bad := unknown(body.get("model"))) is not None:
                return bad
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [
                {"object": "embedding", "index": i, "embedding": _vector(str(t))}
                for i, t in enumerate(texts)
            ]
            tokens = sum(len(str(t).split()) for t in texts)
            usage = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}
            return {
                "id": "embd-1",
                "object": "list",
                "created": 1,
                "model": MODEL,
                "data": data,
                "usage": usage,
            }

        @app.post("/tokenize")
        async def tokenize(request: Request) -> Any:
            body = await held(request)
            if (bad := unknown(body.get("model"))) is not None:
                return bad
            tokens = [len(w) for w in str(body.get("prompt", "")).split()]
            return {
                "count": len(tokens),
                "max_model_len": MAX_MODEL_LEN,
                "tokens": tokens,
                "token_strs": None,
            }

        @app.post("/detokenize")
        async def detokenize(request: Request) -> Any:
            body = await held(request)
            return {"prompt": " ".join("x" * t for t in body.get("tokens", []))}

        @app.post("/pooling")
        @app.post("/classify")
        async def pooling(request: Request) -> Any:
            await held(request)
            return {
                "id": "pool-1",
                "object": "list",
                "model": MODEL,
                "data": [{"index": 0, "data": [0.25, 0.75]}],
            }

        @app.post("/score")
        @app.post("/v1/score")
        @app.post("/rerank")
        @app.post("/v1/rerank")
        @app.post("/v2/rerank")
        async def score(request: Request) -> Any:
            body = await held(request)
            docs = body.get("documents") or body.get("text_2") or []
            results = [{"index": i, "relevance_score": 1.0 / (i + 1)} for i in range(len(docs))]
            return {"id": "rerank-1", "model": MODEL, "results": results}

        return app


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [b / 255 for b in digest[:8]]
