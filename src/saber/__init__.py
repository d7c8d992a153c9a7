"""SABER: SLA-aware admission control for self-hosted code models."""

import sys

__version__ = "0.1.0"

# httpx's __init__ imports its command-line client, httpx._main, whenever click, pygments
# and rich are installed, as they are with saber (uvicorn needs click; saber-profile's
# tables are rich's): 35 ms and three packages at the gateway's start, used by no part of
# saber. With this entry that import fails and httpx falls back to a stub ``main``; the
# ``httpx`` command runs in a process of its own and is not affected.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
