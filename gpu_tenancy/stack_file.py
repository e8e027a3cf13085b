"""Reading a ``Pulumi.<stack>.yaml`` without the Pulumi CLI, for the offline tools."""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from .config import CONFIG_NAMESPACE, ConfigError, StackConfig, config_value, misspelt_namespaces, secure_placeholder


class UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML in which a key given twice is an error rather than the last one silently winning,
    as Go's yaml.v3 (the Pulumi CLI) and kubectl's strict decoding refuse it."""

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


class _StackFileLoader(UniqueKeyLoader):
    """YAML as the Pulumi CLI reads a stack file (Go's yaml.v3): only true and false are booleans
    (``name: on`` or ``namespace: no`` stay strings, where YAML 1.1 would make them booleans) and a
    key given twice is an error."""

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        limit = sys.get_int_max_str_digits()
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # `!!int x`, or more digits than Python converts to an int
            if limit and len(node.value) > limit:
                problem = f"an integer of {len(node.value)} digits: at most {limit} are read; quote it if it is text"
            else:
                problem = f"{_shown(node.value)} is not an integer"
            raise ConstructorError(None, None, problem, node.start_mark) from None
        except IndexError:  # `!!int ''`, `!!int +`
            raise ConstructorError(None, None, f"{_shown(node.value)} is not an integer", node.start_mark) from None
        try:
            # Hexadecimal, octal and binary forms are not held to the limit when read, but every
            # later str() or JSON of the value is.
            str(value)
        except ValueError:
            problem = f"an integer of more than {limit} decimal digits: at most {limit} are read; quote it if it is text"
            raise ConstructorError(None, None, problem, node.start_mark) from None
        return value

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> bool:
        try:
            return super().construct_yaml_bool(node)
        except KeyError:  # `!!bool x`
            problem = f"{_shown(node.value)} is not a boolean (true or false)"
            raise ConstructorError(None, None, problem, node.start_mark) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        try:
            return super().construct_yaml_float(node)
        except ValueError:  # `!!float x`
            raise ConstructorError(None, None, f"{_shown(node.value)} is not a number", node.start_mark) from None

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except (AttributeError, ValueError):  # `!!timestamp x`, `!!timestamp 2001-13-01`
            raise ConstructorError(None, None, f"{_shown(node.value)} is not a timestamp", node.start_mark) from None


def _shown(text: str) -> str:
    """A scalar quoted for a message, cut short: it may be thousands of characters."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


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
# yaml.v3's floats (resolve.go): a scalar starting with a digit or sign is a number if, its
# underscores removed, it matches yamlStyleFloat (`1e3`, `1.`, `1_000.5`); one starting with '.'
# only as Go's ParseFloat reads it, underscores not allowed (`.5`, never `._5`).
_DIGITS = r"_*(?:[0-9]_*)+"
_StackFileLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(rf"^[-+]?(?:_*\.{_DIGITS}|{_DIGITS}(?:\.(?:_*[0-9])*_*)?)(?:[eE]_*[-+]?{_DIGITS})?$|^[-+]\.(?:inf|Inf|INF)$"),
    list("-+0123456789"),
)
_StackFileLoader.add_implicit_resolver(
    _FLOAT, re.compile(r"^\.[0-9]+(?:[eE][-+]?[0-9]+)?$|^\.(?:inf|Inf|INF|nan|NaN|NAN)$"), ["."]
)
_StackFileLoader.add_constructor(_INT, _StackFileLoader.construct_yaml_int)
_StackFileLoader.add_constructor(_BOOL, _StackFileLoader.construct_yaml_bool)
_StackFileLoader.add_constructor(_FLOAT, _StackFileLoader.construct_yaml_float)
_StackFileLoader.add_constructor("tag:yaml.org,2002:timestamp", _StackFileLoader.construct_yaml_timestamp)

# Values JSON has no form for, so the program could not be handed them as the CLI hands config
# (JSON text). Only an explicit tag makes them here: an untagged 2001-12-14 is already a string.
_NOT_JSON: dict[type, str] = {
    bytes: "a YAML !!binary value; write the text as a quoted string",
    set: "a YAML !!set; write a list",
    datetime.date: "a YAML timestamp; quote it",  # datetime.datetime too, a subclass
}


def read_stack_file(path: Path, *, whole_secrets: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The file's config as ``{"namespace:key": value}`` plus the keys holding ``secure:`` values.

    Secure values cannot be decrypted offline; they become readable placeholders, and their keys
    are reported so callers can mark them secret as the engine would. A key of ours encrypted as a
    whole is an error, since nothing of it can be checked, unless ``whole_secrets`` (for a caller
    that reads only the keys it can, such as tools.preflight).
    """
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_StackFileLoader) or {}
    # TypeError: an unhashable key; ValueError: a value its tag cannot hold (`!!timestamp 2001-13-01`).
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, ValueError) as error:
        raise ConfigError([("", f"cannot read {path}: {' '.join(str(error).split())}")]) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError([("", f"cannot read {path}: its values are nested too deeply")]) from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(config, dict | None):
        raise ConfigError([("", f"{path} is not a stack file: expected a mapping with a 'config' mapping")])
    misspelt = misspelt_namespaces(map(str, config or {}))
    if misspelt:
        raise ConfigError(misspelt)
    try:
        return _read_config(config or {}, whole_secrets)
    except RecursionError:  # an alias inside itself (`&a [*a]`), or nesting deeper than Python recurses
        raise ConfigError([("", f"cannot read {path}: a value contains itself or is nested too deeply")]) from None


def _read_config(config: dict[Any, Any], whole_secrets: bool) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    secret_keys: list[str] = []
    problems: list[tuple[str, str]] = []
    given_as: dict[str, str] = {}
    for raw_key, value in config.items():
        key = str(raw_key)
        full_key = key if ":" in key else f"{CONFIG_NAMESPACE}:{key}"
        # The CLI reads a bare key in the project's namespace: `tenants` and `gpu-tenancy:tenants`
        # are one key given twice, and neither silently wins.
        if full_key in given_as:
            again = f"is {given_as[full_key]} again: a key without a namespace is in the project's ({CONFIG_NAMESPACE})"
            problems.append((key, f"{again}; keep one"))
        given_as[full_key] = key
        problems.extend(_not_json_key(raw_key, "config"))
        whole = isinstance(value, dict) and set(value) == {"secure"}
        if whole and not whole_secrets and full_key.startswith(f"{CONFIG_NAMESPACE}:"):
            problems.append(
                (
                    key,
                    "is encrypted as a whole (secure:), which the offline tools cannot decrypt (pulumi up can); to "
                    "check it offline, keep only its secret fields secret: pulumi config set --secret --path "
                    f"'{full_key}.<field>' (e.g. tenants[0].workers[0].ssh.privateKey)",
                )
            )
        problems.extend(_not_json(value, full_key))
        if _has_secure(value):
            secret_keys.append(full_key)
        values[full_key] = _as_go_json(_strip_secure(value)) if isinstance(value, dict | list) else value
    if problems:
        raise ConfigError(problems)
    return values, secret_keys


def _as_go_json(value: Any) -> Any:
    """An object value as the CLI hands it over: Go's json.Marshal of what yaml.v3 read.

    yaml.v3 reads ``2.0`` inside an object as a float64, and Go's JSON writes a whole one below 1e21
    without a fraction (``count: 2.0`` reaches the program as 2), where Python's JSON keeps ``2.0``.
    """
    if isinstance(value, dict):
        return {key: _as_go_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_go_json(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


# The project's own stack files sit beside Pulumi.yaml, one directory up.
PROJECT_DIR = Path(__file__).resolve().parent.parent


def stack_file(stack: str) -> Path:
    """The project's ``Pulumi.<stack>.yaml``; a fully qualified ``org/project/stack`` names its last part, as the CLI does."""
    return PROJECT_DIR / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml"


def is_file(path: Path) -> bool:
    """``path.is_file()``, false too for a name the system refuses (too long, say) instead of raising."""
    try:
        return path.is_file()
    except OSError:
        return False


def missing_file(path: Path, what: str) -> str | None:
    """Why ``path`` cannot be read as ``what`` (a directory, or nothing there), or None when it is a file."""
    if is_file(path):
        return None
    try:
        directory = path.is_dir()
    except OSError:
        directory = False
    return f"{what} {path} is a directory, not a file" if directory else f"no such {what}: {path}"


def load_stack_config(path: Path) -> StackConfig:
    """The validated ``gpu-tenancy`` config of a stack file (raises ``ConfigError``), read as the program reads it."""
    values, _ = read_stack_file(path)
    prefix = f"{CONFIG_NAMESPACE}:"
    return StackConfig.load(
        {
            key[len(prefix) :]: config_value(value, key[len(prefix) :]) if isinstance(value, str) else value
            for key, value in values.items()
            if key.startswith(prefix)
        }
    )


def _not_json(value: Any, where: str) -> list[tuple[str, str]]:
    """(path, why) for each key or value under ``where`` that has no JSON form (``_NOT_JSON``)."""
    if isinstance(value, dict):
        problems = []
        for key, item in value.items():
            problems.extend(_not_json_key(key, where))
            problems.extend(_not_json(item, f"{where}.{key}"))
        return problems
    if isinstance(value, list | tuple):  # tuples: the pairs of `!!omap` and `!!pairs`
        return [problem for index, item in enumerate(value) for problem in _not_json(item, f"{where}[{index}]")]
    return [(where, why) for kind, why in _NOT_JSON.items() if isinstance(value, kind)]


def _not_json_key(key: Any, where: str) -> list[tuple[str, str]]:
    return [(where, f"the key {key} is {why}") for kind, why in _NOT_JSON.items() if isinstance(key, kind)]


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure(v) for v in value)
    return False


def _strip_secure(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return secure_placeholder(str(value["secure"]))
        return {k: _strip_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_secure(v) for v in value]
    return value
