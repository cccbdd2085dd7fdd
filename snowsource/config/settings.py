"""The names everyone imports: the configuration model and ``load_config``.

The configuration is split by concept — ``fields`` (value types), ``models`` (the frozen
pydantic-settings model), ``yaml_loader`` (parsing the file), ``sources`` (its pydantic-settings
sources: the file, the environment and ``.file`` secrets), ``problems`` (error text),
``availability`` (features not shipped yet), ``redaction`` (showing it safely) and ``loader``
(putting them together). This module re-exports the public names so that
``from snowsource.config.settings import Settings, load_config`` keeps working.
"""

from __future__ import annotations

from snowsource.config.availability import NOT_YET_AVAILABLE
from snowsource.config.fields import (
    AuthType,
    CompressionType,
    Deletes,
    DisplayValue,
    LogFormat,
    LogLevel,
    OAuthGrantType,
    SaslMechanism,
    SecurityProtocol,
    TasksAssignment,
    ValueFormat,
    ValueSchema,
)
from snowsource.config.loader import (
    DEFAULT_CONFIG_PATH,
    LoadedConfig,
    load_config,
    resolve_config_path,
)
from snowsource.config.models import (
    AuthConfig,
    HttpConfig,
    KafkaConfig,
    LogConfig,
    RestConfig,
    Settings,
    SnowConfig,
    TableConfig,
)
from snowsource.config.redaction import REDACTED, RedactedConfig, mask_userinfo, redacted_dict
from snowsource.config.sources import CONFIG_ENV, ENV_PREFIX
from snowsource.config.yaml_loader import MAX_EXPANDED_NODES, ConfigFileNotFoundError

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_CONFIG_PATH",
    "ENV_PREFIX",
    "MAX_EXPANDED_NODES",
    "NOT_YET_AVAILABLE",
    "REDACTED",
    "AuthConfig",
    "AuthType",
    "CompressionType",
    "ConfigFileNotFoundError",
    "Deletes",
    "DisplayValue",
    "HttpConfig",
    "KafkaConfig",
    "LoadedConfig",
    "LogConfig",
    "LogFormat",
    "LogLevel",
    "OAuthGrantType",
    "RedactedConfig",
    "RestConfig",
    "SaslMechanism",
    "SecurityProtocol",
    "Settings",
    "SnowConfig",
    "TableConfig",
    "TasksAssignment",
    "ValueFormat",
    "ValueSchema",
    "load_config",
    "mask_userinfo",
    "redacted_dict",
    "resolve_config_path",
]
