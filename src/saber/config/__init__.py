"""Settings from YAML: task types, workload mixes, and saber-gateway's configuration
(``load_gateway_config``: the file, ``SABER_*`` environment variables and flags)."""

from saber.config._errors import ConfigError
from saber.config._gateway import (
    DEFAULT_PROFILE_NAME,
    AliasTarget,
    ApiKey,
    Backend,
    BackendEntry,
    BackendSettings,
    ClusterSettings,
    GatewayConfig,
    PassthroughSettings,
    RefitSettings,
    TaskRule,
)
from saber.config._gateway_load import DEFAULT_GATEWAY_CONFIG, ENV_VARS, load_gateway_config
from saber.config._options import add_config_file
from saber.config._slo import PARTS, Part, Slo, SloBounds, tpot_of
from saber.config._tasks import (
    DEFAULT_CONFIG_DIR,
    DEFAULT_PROFILE_DIR,
    TaskType,
    Workload,
    load_tasks,
    load_workloads,
    parse_tasks,
)
from saber.config._yaml import read_yaml, validate

__all__ = [
    "DEFAULT_CONFIG_DIR",
    "DEFAULT_GATEWAY_CONFIG",
    "DEFAULT_PROFILE_DIR",
    "DEFAULT_PROFILE_NAME",
    "ENV_VARS",
    "PARTS",
    "AliasTarget",
    "ApiKey",
    "Backend",
    "BackendEntry",
    "BackendSettings",
    "ClusterSettings",
    "ConfigError",
    "GatewayConfig",
    "Part",
    "PassthroughSettings",
    "RefitSettings",
    "Slo",
    "SloBounds",
    "TaskRule",
    "TaskType",
    "Workload",
    "add_config_file",
    "load_gateway_config",
    "load_tasks",
    "load_workloads",
    "parse_tasks",
    "read_yaml",
    "tpot_of",
    "validate",
]
