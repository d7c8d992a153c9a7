"""``saber-sim``: the command line of the vLLM stand-in."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from saber.engine import PRESETS, UnknownPresetError
from saber.sim.http.server import make_server
from saber.sim.http.server_info import dev_mode
from saber.sim.http.settings import FaultSettings, SimSettings

DESCRIPTION = """\
An OpenAI-compatible stand-in for vLLM's API server that needs no GPU. It steps
saber's engine model (continuous batching, chunked prefill, paged KV cache) on
the wall clock and streams each request's tokens as the modelled steps produce
them. Same routes, SSE frames, errors and /metrics names as vLLM; with
VLLM_SERVER_DEV_MODE=1 in the environment, as vLLM, also GET /server_info (which
says the --scheduling-policy). See docs/saber-sim.md.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Shows each flag's default, except where it is None (the help says what then)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        hidden = action.default is None or action.default is False
        if not hidden and action.default != argparse.SUPPRESS and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    d = SimSettings()
    p = argparse.ArgumentParser(
        prog="saber-sim",
        description=DESCRIPTION,
        formatter_class=_Formatter,
    )
    server = p.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on")
    server.add_argument("--port", type=int, default=8000, help="port to listen on")
    server.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        default=None,
        help="model name(s) the server answers to; the first is reported in responses "
        "(default: the preset's model, e.g. qwen2.5-coder-3b)",
    )
    server.add_argument(
        "--uvicorn-log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn's log level",
    )
    server.add_argument(
        "--disable-uvicorn-access-log", action="store_true", help="do not log every request"
    )

    engine = p.add_argument_group("engine model")
    engine.add_argument(
        "--preset",
        default=d.preset,
        help="engine preset: accelerator x model (see --list-presets)",
    )
    engine.add_argument(
        "--list-presets", action="store_true", help="print the engine presets and exit"
    )
    engine.add_argument(
        "--max-num-seqs",
        type=int,
        default=d.max_num_seqs,
        help="most requests in a batch; later ones wait (vllm:num_requests_waiting)",
    )
    engine.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=d.max_num_batched_tokens,
        help="token budget of one step (chunked prefill)",
    )
    engine.add_argument(
        "--kv-capacity-tokens",
        type=int,
        default=None,
        help="KV-cache size in tokens (default: what the preset's GPU memory leaves)",
    )
    engine.add_argument(
        "--scheduling-policy",
        choices=["fcfs", "priority"],
        default=d.scheduling_policy,
        help="the scheduling policy to use: 'fcfs' (first come, first served; a request's "
        "priority is ignored) or 'priority' (requests are handled by their 'priority' "
        "field, lower values earlier, ties by arrival time; the lowest-priority running "
        "request is preempted first)",
    )
    engine.add_argument(
        "--max-model-len",
        type=int,
        default=d.max_model_len,
        help="context length: longer prompts get a 400; the default max_tokens is "
        "what the prompt leaves",
    )
    engine.add_argument(
        "--time-scale",
        type=float,
        default=d.time_scale,
        help="engine seconds per wall-clock second; 10 runs the model ten times faster "
        "than real time (times in /metrics stay wall-clock)",
    )

    out = p.add_argument_group("output lengths")
    out.add_argument(
        "--output-len",
        default=d.output_len,
        metavar="SPEC",
        help="natural answer length when ignore_eos is off: 'task' (drawn from the task "
        "type the prompt looks like), 'fixed:N' or 'lognormal:MEAN:CV'; always capped by "
        "max_tokens",
    )
    out.add_argument(
        "--fallback-output-len",
        default=d.fallback_output_len,
        metavar="SPEC",
        help="with --output-len task, the length of prompts that look like no task type",
    )
    out.add_argument(
        "--seed", type=int, default=d.seed, help="seed of output lengths and fault draws"
    )

    faults = p.add_argument_group("fault injection")
    faults.add_argument(
        "--error-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="share of generation requests answered 500",
    )
    faults.add_argument(
        "--stall-prob",
        type=float,
        default=0.0,
        metavar="P",
        help="share of generation requests that stall: the response stops after "
        "--stall-after tokens and hangs until the client disconnects",
    )
    faults.add_argument(
        "--stall-after",
        type=int,
        default=0,
        metavar="N",
        help="tokens a stalled response sends before it stops",
    )
    faults.add_argument(
        "--refuse-for",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="refuse connections for this long after start-up (also settable at run "
        'time: POST /sim/faults {"refuse_for": SECONDS})',
    )
    return p


def settings_from_args(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> SimSettings:
    """The settings the flags say, and ``VLLM_SERVER_DEV_MODE`` from ``env`` (default:
    this process's environment), which vLLM reads from there too."""
    return SimSettings(
        preset=args.preset,
        served_model_name=tuple(args.served_model_name or ()),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_capacity_tokens=args.kv_capacity_tokens,
        scheduling_policy=args.scheduling_policy,
        max_model_len=args.max_model_len,
        time_scale=args.time_scale,
        seed=args.seed,
        output_len=args.output_len,
        fallback_output_len=args.fallback_output_len,
        faults=FaultSettings(
            error_rate=args.error_rate,
            stall_prob=args.stall_prob,
            stall_after=args.stall_after,
            refuse_for=args.refuse_for,
        ),
        dev_mode=dev_mode(env),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_presets:
        for name in sorted(PRESETS):
            print(name)
        return
    try:
        settings = settings_from_args(args)
        server = make_server(
            settings,
            host=args.host,
            port=args.port,
            log_level=args.uvicorn_log_level,
            access_log=not args.disable_uvicorn_access_log,
            configure_logging=True,
        )
    except (ValueError, UnknownPresetError) as exc:
        parser.error(str(exc))
    server.run()
    if not server.started:
        sys.exit(3)  # uvicorn already logged why (e.g. the port is taken)
