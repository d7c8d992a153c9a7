"""saber-sim: an OpenAI-compatible vLLM stand-in that serves the engine model in real time.

``create_app(settings)`` builds the ASGI app; ``serve_in_thread`` and ``serve``
run it on 127.0.0.1 for tests and demos; ``saber-sim`` (``cli.main``) runs it
from the command line. See docs/saber-sim.md.
"""

from saber.sim.http.app import SimState, create_app
from saber.sim.http.lengths import OutputLengths
from saber.sim.http.server import RunningSim, SimServer, make_server, serve, serve_in_thread
from saber.sim.http.settings import FaultSettings, SimSettings

__all__ = [
    "FaultSettings",
    "OutputLengths",
    "RunningSim",
    "SimServer",
    "SimSettings",
    "SimState",
    "create_app",
    "make_server",
    "serve",
    "serve_in_thread",
]
