"""The model list clients see: the backend's models, then the aliases that stand for them.

An alias's card is its real model's, renamed: the same ``created`` and, from vLLM,
``max_model_len``, so that a client that sizes its prompts from the card (an IDE
assistant trimming context) sizes them for the real model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from saber.gateway.edge.tasks import TaskResolver
from saber.gateway.errors import GatewayError
from saber.gateway.upstream.client import BackendFailure

if TYPE_CHECKING:
    from saber.gateway.assembly import Gateway

ALIAS_OWNER = "saber-gateway"
CARD_FIELDS = ("created", "max_model_len")
"""What an alias's card takes from its real model's card."""


def model_cards(backend: list[dict[str, Any]], resolver: TaskResolver) -> list[dict[str, Any]]:
    """The backend's cards, then one per alias (configured ones, and ``<model>:<task>``
    for each backend model and task type) whose name the backend does not use."""
    owned = {m["id"]: m for m in backend}
    aliases: list[dict[str, Any]] = []
    for alias, real in resolver.alias_names(list(owned)):
        if alias in owned:
            continue
        card: dict[str, Any] = {
            "id": alias,
            "object": "model",
            "created": 0,
            "owned_by": ALIAS_OWNER,
            "root": real,
            "parent": real,
        }
        card.update({k: owned[real][k] for k in CARD_FIELDS if k in owned.get(real, {})})
        aliases.append(card)
    return backend + aliases


def model_card(
    backend: list[dict[str, Any]], resolver: TaskResolver, model_id: str
) -> dict[str, Any] | None:
    """One model's card (``GET /v1/models/{id}``, which vLLM itself does not serve)."""
    return next((card for card in model_cards(backend, resolver) if card["id"] == model_id), None)


async def answer_with_models(
    gw: Gateway, render: Callable[[list[dict[str, Any]]], Response]
) -> Response:
    """``render`` of the backend's model list, or the OpenAI-shaped error that says why
    there is none (the backend down, or answering something else)."""
    try:
        backend = await gw.backend_models()
    except GatewayError as err:
        return err.response()
    except BackendFailure as failure:
        return GatewayError(failure.outcome, failure.message).response()
    return render(backend)
