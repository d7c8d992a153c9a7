"""The inference engine behind saber: which one it is, and how busy it is.

Shared by the gateway and saber-profile; imports nothing else from saber but the
wire format (``saber.wire``).

- ``detect_kind`` / ``describe``: vLLM, llama.cpp's llama-server or saber-sim,
  with its version and models (the probe order is in ``_detect``'s docstring);
- ``scheduling_policy``: ``fcfs`` or ``priority``, where the engine says (vLLM's
  developer-mode ``/server_info``; saber-sim's);
- ``fetch_load`` / ``parse_load``: the requests it is running and holding back,
  from its own ``/metrics``, whoever sent them;
- ``describe_exc`` / ``refused``: a failed request to it, in words.

Every ``base_url`` is the server's root, without ``/v1``; the ``httpx`` client
passed in carries the backend's auth header, if it needs one.
"""

from saber.backend._detect import SIM_ENGINE, describe, detect_kind
from saber.backend._http import describe_exc, refused
from saber.backend._kind import BackendError, BackendInfo, BackendKind
from saber.backend._load import LOAD_METRICS, BackendLoad, fetch_load, parse_load
from saber.backend._policy import SchedulingPolicy, policy_of, scheduling_policy

__all__ = [
    "LOAD_METRICS",
    "SIM_ENGINE",
    "BackendError",
    "BackendInfo",
    "BackendKind",
    "BackendLoad",
    "SchedulingPolicy",
    "describe",
    "describe_exc",
    "detect_kind",
    "fetch_load",
    "parse_load",
    "policy_of",
    "refused",
    "scheduling_policy",
]
