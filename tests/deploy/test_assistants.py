"""Each IDE assistant's requests, in the exact shape its own source sends them, through
a real gateway with the shipped config: with the plain served model name, and as the
configs in configs/ide/ set them up. The task type each lands on is checked, and for
Continue's autocomplete the fill-in-the-middle prompt it builds from the shipped config.

Shapes read from each project's source (reference, not copied):
- Continue (core/llm/llms/OpenAI.ts, core/llm/openaiTypeConverters.ts, packages/
  openai-adapters): chat and edit go to /v1/chat/completions with ``max_tokens`` 4096
  (its default), ``stream`` and ``stream_options.include_usage``; autocomplete goes to
  /v1/completions with the rendered FIM prompt, ``max_tokens`` 4096, ``stream`` and
  the template's stop words (core/autocomplete: templating/index.ts renders the prompt,
  AutocompleteTemplate.ts's getTemplateForModel picks the template by model name
  unless ``promptTemplates.autocomplete`` is set).
- Cline (the AI SDK's openai-compatible provider): /v1/chat/completions, a system
  prompt, tools, ``stream`` with ``stream_options.include_usage``, its custom headers.
- Tabby (crates/http-api-bindings): ``vllm/completion`` posts ``model``, the prompt
  rendered by ``prompt_template``, ``suffix: null``, ``max_tokens`` 64, ``temperature``,
  ``stream``, ``presence_penalty``; ``openai/chat`` goes through async-openai.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import pytest
import yaml
from deploy_support import IDE_DIR, SERVED_MODEL, Stack

CONTINUE = yaml.safe_load((IDE_DIR / "continue" / "config.yaml").read_text())
ROLE = {role: m for m in CONTINUE["models"] for role in m.get("roles", [])}

# -- Continue's autocomplete prompt -------------------------------------------------

FIM_TEMPLATES = {
    # getTemplateForModel's templates, by the tokens they put around the hole.
    "qwen-multifile": "<|fim_prefix|>{{{prefix}}}<|fim_suffix|>{{{suffix}}}<|fim_middle|>",
    "stable-code": "<fim_prefix>{{{prefix}}}<fim_suffix>{{{suffix}}}<fim_middle>",
    "codestral": "[SUFFIX]{{{suffix}}}[PREFIX]{{{prefix}}}",
    "codellama": "<PRE> {{{prefix}}} <SUF>{{{suffix}}} <MID>",
    "deepseek": "<\uff5cfim\u2581begin\uff5c>{{{prefix}}}<\uff5cfim\u2581hole\uff5c>{{{suffix}}}"
    "<\uff5cfim\u2581end\uff5c>",
}


def continue_template_for_model(model: str) -> str:
    """Which template Continue picks for a model name (getTemplateForModel, first match)."""
    name = model.lower()
    if "qwen" in name and "coder" in name:
        return "qwen-multifile"
    if any(k in name for k in ("starcoder", "star-coder", "starchat", "octocoder", "stable")):
        return "stable-code"
    if "codeqwen" in name or "qwen" in name:
        return "stable-code"
    for key, template in (("codestral", "codestral"), ("codellama", "codellama")):
        if key in name:
            return template
    if "deepseek" in name:
        return "deepseek"
    return "stable-code"  # what any other name gets


@dataclass
class Editor:
    """What autocomplete sees: a file in a workspace, and the cursor in it."""

    workspace: str = "/home/dev/calc"
    filepath: str = "/home/dev/calc/src/calc.py"
    prefix: str = "def add(a, b):\n    "
    suffix: str = "\n\nprint(add(1, 2))"
    comment: str = "#"  # the language's single-line comment (Python)


def continue_autocomplete_prompt(entry: dict[str, Any], ed: Editor) -> str:
    """The prompt Continue builds for an autocomplete model entry with no snippets:
    renderPrompt with the entry's ``promptTemplates.autocomplete`` if set, else the
    template its model name picks. A string template gets the snippets (none here)
    and the current file's path, as comments, before the prefix (formatSnippets);
    an empty suffix becomes a newline; Handlebars' ``{{{x}}}`` is put in as is."""
    template = entry.get("promptTemplates", {}).get("autocomplete")
    suffix = ed.suffix or "\n"
    if template is None:
        chosen = continue_template_for_model(entry["model"])
        if chosen == "qwen-multifile":  # its own prefix/suffix step: as is without snippets
            return f"<|fim_prefix|>{ed.prefix}<|fim_suffix|>{suffix}<|fim_middle|>"
        template = FIM_TEMPLATES[chosen]
    relative = PurePosixPath(ed.filepath).relative_to(ed.workspace)
    path_comment = f"{ed.comment} {'/'.join(relative.parts[-2:])}"
    prefix = "\n".join(["" + f"\n{path_comment}", ed.prefix])
    values = {"prefix": prefix, "suffix": suffix, "filename": relative.name}
    assert re.fullmatch(r"([^{}]|\{\{\{\w+\}\}\})*", template), "only {{{var}}} is handled"
    return re.sub(r"\{\{\{(\w+)\}\}\}", lambda m: values[m.group(1)], template)


def test_the_shipped_autocomplete_prompt_carries_qwens_fim_tokens() -> None:
    entry = ROLE["autocomplete"]
    prompt = continue_autocomplete_prompt(entry, Editor())
    assert prompt == (
        "<|fim_prefix|>\n# src/calc.py\ndef add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))"
        "<|fim_middle|>"
    )
    # Without the explicit template, the alias would get StarCoder's tokens: issue 15.
    bare = {k: v for k, v in entry.items() if k != "promptTemplates"}
    assert continue_autocomplete_prompt(bare, Editor()).startswith("<fim_prefix>")
    # A served name Continue knows picks Qwen's own template.
    named = {**bare, "model": f"{SERVED_MODEL}:code_completion"}
    assert continue_autocomplete_prompt(named, Editor()).startswith("<|fim_prefix|>def add")


# -- the requests -------------------------------------------------------------------

SYSTEM = "You are an expert software developer. You give helpful and concise responses."
USER = "Explain what this function does:\n```python\ndef add(a, b):\n    return a + b\n```"
READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read the contents of a file in the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
CONTINUE_STOP = ["/src/", "#- coding: utf-8", "```"]  # getStopTokens' common stops
TABBY_QWEN_TEMPLATE = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"


@dataclass(frozen=True)
class Call:
    name: str
    path: str
    body: dict[str, Any]
    task: str  # what the gateway must pick
    headers: dict[str, str] = field(default_factory=dict)


def continue_chat(model: str, headers: dict[str, str], task: str, name: str) -> Call:
    body = {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
        "model": model,
        "max_tokens": 4096,
        "stream": True,
        "tools": [READ_FILE_TOOL],
        "stream_options": {"include_usage": True},
    }
    return Call(name, "/v1/chat/completions", body, task, headers)


def continue_autocomplete(entry: dict[str, Any], task: str, name: str) -> Call:
    body = {
        "model": entry["model"],
        "max_tokens": 4096,
        "stream": True,
        "stop": ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", *CONTINUE_STOP],
        "prompt": continue_autocomplete_prompt(entry, Editor()),
    }
    return Call(name, "/v1/completions", body, task)


def cline(model: str, headers: dict[str, str], task: str, name: str) -> Call:
    body = {
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "You are Cline, a highly skilled software engineer."},
            {"role": "user", "content": [{"type": "text", "text": "<task>Add a test.</task>"}]},
        ],
        "tools": [READ_FILE_TOOL],
        "tool_choice": "auto",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return Call(name, "/v1/chat/completions", body, task, headers)


def tabby_completion(model: str, task: str, name: str) -> Call:
    ed = Editor()
    prompt = TABBY_QWEN_TEMPLATE.format(prefix=ed.prefix, suffix=ed.suffix)
    body = {
        "model": model,
        "prompt": prompt,
        "suffix": None,
        "max_tokens": 64,
        "temperature": 0.1,
        "stream": True,
        "presence_penalty": 0.0,
    }
    return Call(name, "/v1/completions", body, task)


def tabby_chat(model: str, task: str, name: str) -> Call:
    body = {
        "messages": [{"role": "user", "content": USER}],
        "model": model,
        "presence_penalty": 0.0,
        "seed": 0,
        "stream": True,
        "temperature": 0.1,
    }
    return Call(name, "/v1/chat/completions", body, task)


def _tabby_model(role: str) -> str:
    import tomllib

    doc = tomllib.loads((IDE_DIR / "tabby" / "config.toml").read_text())
    return str(doc["model"][role]["http"]["model_name"])


def _cline_state() -> dict[str, Any]:
    return json.loads((IDE_DIR / "cline" / "globalState.json").read_text())


def _headers(entry: dict[str, Any]) -> dict[str, str]:
    return dict(entry.get("requestOptions", {}).get("headers", {}))


PLAIN = {**ROLE["autocomplete"], "model": SERVED_MODEL}
PLAIN.pop("promptTemplates")
CALLS = [
    # The plain served model name: only the request itself tells the gateway.
    continue_chat(SERVED_MODEL, {}, "code_generation", "continue chat, plain name"),
    continue_chat(SERVED_MODEL, {}, "code_generation", "continue edit, plain name"),
    continue_autocomplete(PLAIN, "code_completion", "continue autocomplete, plain name"),
    cline(SERVED_MODEL, {}, "code_generation", "cline, plain name"),
    tabby_completion(SERVED_MODEL, "code_completion", "tabby completion, plain name"),
    tabby_chat(SERVED_MODEL, "code_generation", "tabby chat, plain name"),
    # As configs/ide/ sets each one up.
    continue_chat(ROLE["chat"]["model"], _headers(ROLE["chat"]), "code_qna", "continue chat"),
    continue_chat(
        ROLE["edit"]["model"], _headers(ROLE["edit"]), "code_generation", "continue edit"
    ),
    continue_autocomplete(ROLE["autocomplete"], "code_completion", "continue autocomplete"),
    cline(
        _cline_state()["actModeOpenAiModelId"],
        _cline_state()["openAiHeaders"],
        "code_generation",
        "cline",
    ),
    tabby_completion(_tabby_model("completion"), "code_completion", "tabby completion"),
    tabby_chat(_tabby_model("chat"), "code_qna", "tabby chat"),
]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.name)
def test_each_assistant_lands_on_its_task(call: Call, stack: Stack) -> None:
    headers = {**call.headers, "Authorization": "Bearer sk-test"}
    url = stack.gateway.url + call.path
    with httpx.stream("POST", url, json=call.body, headers=headers, timeout=30) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["x-saber-task"] == call.task
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"


def test_docs_name_what_each_assistant_shows() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    section = docs[docs.index("### When a stream is turned away") :]
    for name in ("Continue", "Cline", "Tabby"):
        assert name in section
