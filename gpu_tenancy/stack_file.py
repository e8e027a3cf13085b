"""Reading a ``Pulumi.<stack>.yaml`` without the Pulumi CLI, for the offline tools."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from .config import CONFIG_NAMESPACE, ConfigError, StackConfig, misspelt_namespaces


class _StackFileLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads a stack file (Go's yaml.v3): only true and false are booleans
    (``name: on`` or ``namespace: no`` stay strings, where YAML 1.1 would make them booleans) and a
    key given twice is an error rather than the last one silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = []
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:  # `<<: *anchor` merges; its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConstructorError(None, None, f"found the key {key!r} twice", key_node.start_mark)
            seen.append(key)
        return super().construct_mapping(node, deep)


_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"
# YAML 1.1 forms yaml.v3 reads as strings: yes/no/on/off, 1:30 (sexagesimal), dates.
_YAML_11_ONLY = {_BOOL, _INT, _FLOAT, "tag:yaml.org,2002:timestamp"}
_StackFileLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in _YAML_11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StackFileLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# PyYAML's own int and float patterns without their sexagesimal forms (0o octal as yaml.v3 reads it).
_StackFileLoader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_StackFileLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def read_stack_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The file's config as ``{"namespace:key": value}`` plus the keys holding ``secure:`` values.

    Secure values cannot be decrypted offline; they become readable placeholders, and their keys
    are reported so callers can mark them secret as the engine would.
    """
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_StackFileLoader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError) as error:  # TypeError: an unhashable key
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
