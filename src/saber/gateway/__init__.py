"""saber-gateway: an OpenAI-compatible proxy that admits requests by SABER's rules.

``create_app(settings)`` builds the ASGI app; ``load_settings`` reads the config
and the profile; ``start_in_thread`` runs a real server in the background.
"""

from saber.gateway.app import create_app
from saber.gateway.assembly import Gateway
from saber.gateway.control.settings import GatewaySettings, load_settings, settings_from_config
from saber.gateway.server import RunningGateway, serve, start_in_thread
from saber.scheduler import Outcome

__all__ = [
    "Gateway",
    "GatewaySettings",
    "Outcome",
    "RunningGateway",
    "create_app",
    "load_settings",
    "serve",
    "settings_from_config",
    "start_in_thread",
]
