"""Helpers for the deployment tests: paths, PromQL metric names, compose interpolation."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from saber.config import GatewayConfig
from saber.gateway import RunningGateway
from saber.sim.http import RunningSim

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES_YML = DEPLOY / "prometheus" / "rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "saber.json"
IDE_DIR = REPO / "configs" / "ide"

# Series Prometheus makes itself, not found in any exposition.
SYNTHETIC_SERIES = frozenset({"up"})
# The served model name the compose stack gives vLLM (VLLM_SERVED_MODEL_NAME).
SERVED_MODEL = "qwen-coder"


@dataclass(frozen=True)
class Stack:
    """A running saber-sim and a gateway in front of it, with the shipped config."""

    sim: RunningSim
    gateway: RunningGateway
    config: GatewayConfig

    def gateway_metrics(self) -> str:
        return httpx.get(self.gateway.url + "/metrics", timeout=10).text

    def sim_metrics(self) -> str:
        return httpx.get(self.sim.url + "/metrics", timeout=10).text


def find_tool(name: str) -> str | None:
    """A command on PATH, or installed next to this Python (the virtualenv's bin/)."""
    found = shutil.which(name)
    if found:
        return found
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else None


# ---------------------------------------------------------------------------
# PromQL: the metric names an expression reads
# ---------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
    | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*)
    | (?P<range>\[[^\]]*\])
    | (?P<num>0[xX][0-9a-fA-F]+
        |(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)
# Words that are never metric names when they stand outside braces.
_KEYWORDS = frozenset(
    {
        # binary operators and modifiers
        "and", "or", "unless", "atan2", "bool", "offset", "by", "without", "on",
        "ignoring", "group_left", "group_right",
        # aggregations (they may be written without parentheses right after: "sum by")
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
        # number literals
        "inf", "nan",
    }
)  # fmt: skip
# These are followed by a parenthesised list of label names.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def _tokens(expr: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read PromQL at {expr[pos : pos + 20]!r} in {expr!r}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            yield kind, m.group()


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: not functions, keywords or label names."""
    toks = list(_tokens(expr))
    names: set[str] = set()
    braces = 0  # inside {...}: label names and values
    label_list = False  # inside by (...), on (...), ...
    for i, (kind, text) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text == "{":
            braces += 1
        elif text == "}":
            braces -= 1
        elif label_list:
            label_list = text != ")"
        elif kind == "ident" and braces == 0:
            word = text.lower()
            if word in _LABEL_LISTS and nxt == "(":
                label_list = True
                continue
            if word in _KEYWORDS or nxt == "(":  # a keyword, or a function call
                continue
            names.add(text)
    return names


_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<metric>[^,()]+?)\s*,\s*)?\w+\s*\)\s*$")


def template_query_metrics(query: str) -> set[str]:
    """Metric names in a Grafana variable query: label_values(SELECTOR, label) or PromQL."""
    m = _LABEL_VALUES.match(query)
    if m is None:
        return metric_names(query)
    return metric_names(m["metric"]) if m["metric"] else set()


def exposition_names(text: str) -> set[str]:
    """Every sample name in a Prometheus text exposition (x_total, x_bucket, ...)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names


# ---------------------------------------------------------------------------
# docker compose: variable interpolation, as compose does it
# ---------------------------------------------------------------------------

_VAR = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


def interpolate(value: str, env: Mapping[str, str] | None = None) -> str:
    """``${VAR:-default}`` and friends, resolved with ``env`` (empty: the defaults)."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        name = m["name"] or m["bare"]
        got = env.get(name)
        if m["op"] == ":-" and not got:
            return m["default"]
        if m["op"] == "-" and got is None:
            return m["default"]
        return got or ""

    return _VAR.sub(sub, value)


def merge_compose(base: dict, override: dict) -> dict:  # type: ignore[type-arg]
    """Compose's merge of an override file, for the keys our files use (mappings merge)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_compose(out[key], value)
        else:
            out[key] = value
    return out
