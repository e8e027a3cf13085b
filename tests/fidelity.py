"""Checking what the program emits against upstream schemas.

* Custom resources against their CRD's ``openAPIV3Schema`` from ``../shared/schemas/``, made
  strict the way the API server's pruning is: an object with declared properties accepts no other
  (unless ``x-kubernetes-preserve-unknown-fields``), so a misspelt field fails here instead of
  being silently dropped by the cluster.
* Built-in objects against the Kubernetes v1.36 OpenAPI schema in strict mode (kubernetes-validate).
  Server-side-apply patches are partial objects: they are checked for unknown fields only.
* Helm values: every key we set must exist in the chart's ``values.yaml``.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parent.parent.parent / "shared" / "schemas"
KUBERNETES_VERSION = "1.36.0"


def require_schemas() -> Path:
    if not SCHEMAS.is_dir():
        pytest.skip(f"upstream schemas not present at {SCHEMAS}; fidelity to upstream CRDs and chart values not checked")
    return SCHEMAS


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if (
            schema.get("type") == "object"
            and "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def crd_schema(relative_path: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((require_schemas() / relative_path).read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return _strict(served["schema"]["openAPIV3Schema"])
    raise LookupError(f"{relative_path} has no version {version}")


def validate_custom_resource(obj: dict[str, Any], relative_path: str) -> None:
    version = obj["apiVersion"].split("/")[1]
    jsonschema.Draft7Validator(crd_schema(relative_path, version)).validate(obj)


def validate_builtin(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def _without_required(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _without_required(value) for key, value in schema.items() if key != "required"}
    if isinstance(schema, list):
        return [_without_required(item) for item in schema]
    return schema


def validate_patch(obj: dict[str, Any]) -> None:
    """A partial object (an SSA patch): every field must exist in the strict schema."""
    directory = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", obj["apiVersion"])
    schema = _without_required(
        kv_utils.schema_contents(f"{directory}/{obj['kind'].lower()}-{api_version}.json", KUBERNETES_VERSION)
    )
    definitions = _without_required(kv_utils.schema_contents(f"{directory}/_definitions.json", KUBERNETES_VERSION))
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    jsonschema.validators.Draft202012Validator(schema, registry=registry).validate(obj)


@cache
def chart_values(relative_path: str) -> dict[str, Any]:
    return yaml.safe_load((require_schemas() / relative_path).read_text())


def merged_values(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over a chart's defaults as Helm merges them: maps recursively, a null removes the key."""
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merged_values(merged[key], value)
        else:
            merged[key] = value
    return merged


def unknown_value_keys(values: dict[str, Any], defaults: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths set in ``values`` that the chart's values.yaml does not have."""
    unknown = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if not isinstance(defaults, dict) or key not in defaults:
            unknown.append(path)
        elif isinstance(value, dict) and isinstance(defaults[key], dict) and defaults[key]:
            unknown.extend(unknown_value_keys(value, defaults[key], f"{path}."))
    return unknown


def kubernetes_object(resource: dict[str, Any]) -> dict[str, Any]:
    """The object a pulumi-kubernetes resource's inputs describe (they carry apiVersion and kind)."""
    return json.loads(json.dumps(resource["inputs"]))
