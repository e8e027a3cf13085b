"""Reading a ``Pulumi.<stack>.yaml`` without the Pulumi CLI, for the offline tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .config import CONFIG_NAMESPACE, ConfigError, StackConfig, misspelt_namespaces


def read_stack_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The file's config as ``{"namespace:key": value}`` plus the keys holding ``secure:`` values.

    Secure values cannot be decrypted offline; they become readable placeholders, and their keys
    are reported so callers can mark them secret as the engine would.
    """
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError([("", f"cannot read {path}: {' '.join(str(error).split())}")]) from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(config, dict | None):
        raise ConfigError([("", f"{path} is not a stack file: expected a mapping with a 'config' mapping")])
    values: dict[str, Any] = {}
    secret_keys: list[str] = []
    misspelt = misspelt_namespaces(map(str, config or {}))
    if misspelt:
        raise ConfigError(misspelt)
    for raw_key, value in (config or {}).items():
        key = str(raw_key)
        full_key = key if ":" in key else f"{CONFIG_NAMESPACE}:{key}"
        if _has_secure(value):
            secret_keys.append(full_key)
        values[full_key] = _strip_secure(value)
    return values, secret_keys


def load_stack_config(path: Path) -> StackConfig:
    """The validated ``gpu-tenancy`` config of a stack file (raises ``ConfigError``)."""
    values, _ = read_stack_file(path)
    prefix = f"{CONFIG_NAMESPACE}:"
    return StackConfig.load({key[len(prefix) :]: value for key, value in values.items() if key.startswith(prefix)})


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure(v) for v in value)
    return False


def _strip_secure(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return f"<secure value {str(value['secure'])[:12]}…>"
        return {k: _strip_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_secure(v) for v in value]
    return value
