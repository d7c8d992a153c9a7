"""Fill-in-the-middle: whether a completion request asks for the code between a
prefix and a suffix, as an editor's autocompletion does.

Such a request is code completion whatever its ``max_tokens`` (Continue asks for
4096). It is known by a ``suffix`` field (the OpenAI way, and Tabby's
``openai/completion``), or by the FIM marker tokens of a code model in its prompt
(the way Continue, Tabby's ``vllm/completion`` and llama.vscode send it to vLLM).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FIM_MARKERS: dict[str, tuple[str, ...]] = {
    # Each family's markers, all of which a FIM prompt of that family carries.
    "Qwen2.5-Coder, CodeGemma, Granite 4": ("<|fim_prefix|>", "<|fim_suffix|>"),
    "StarCoder, StarCoder2, StableCode, CodeQwen1.5": ("<fim_prefix>", "<fim_suffix>"),
    "SantaCoder": ("<fim-prefix>", "<fim-suffix>"),
    "DeepSeek-Coder": ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>"),
    "DeepSeek-Coder (ASCII bars)": ("<|fim\u2581begin|>", "<|fim\u2581hole|>"),
    "Code Llama": ("<PRE>", "<SUF>", "<MID>"),
    "Codestral": ("[SUFFIX]", "[PREFIX]"),
    "Seed-Coder": ("<[fim-prefix]>", "<[fim-suffix]>"),
    "CodeGeeX4": ("<|code_prefix|>", "<|code_suffix|>"),
}
"""FIM markers of the common code models, by family."""


def fim_family(text: str) -> str | None:
    """The family whose FIM markers ``text`` carries, None if none."""
    for family, markers in FIM_MARKERS.items():
        if all(marker in text for marker in markers):
            return family
    return None


def is_fim(body: Mapping[str, Any]) -> bool:
    """Whether a completion request is fill-in-the-middle: it has a ``suffix`` (even
    an empty one: the cursor at the end of the file), or its prompt (a string, or
    any string of a list) carries a code model's FIM markers. Token-id prompts
    cannot be read and are not FIM."""
    if isinstance(body.get("suffix"), str):
        return True
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return fim_family(prompt) is not None
    if isinstance(prompt, list):
        return any(isinstance(p, str) and fim_family(p) is not None for p in prompt)
    return False
