"""Check a stack against the gpu-tenancy policy pack offline, exactly as CrossGuard would run it.

    python -m tools.policycheck --stack dev
    python -m tools.policycheck --config path/to/Pulumi.mystack.yaml
    python -m tools.policycheck --resources render.json      # a document in tools.render's format
    ... [--policy-config pack-config.json] [--preview]

Renders the program (as ``tools.render`` does) or reads a rendered document, builds the same
``ResourceValidationArgs`` / ``StackValidationArgs`` the analyzer builds, and calls the pack's own
policy objects. Prints one line per violation, ``LEVEL policy-name urn: message``, then a summary
on stderr. Exit status 1 when a mandatory policy is violated, 0 otherwise, 2 on unusable input.

Stack policies get what the engine gives them, outputs: in a --preview, a resource whose provider
has an unknown input (a fresh stack's management and tenant providers) has none, as
``pulumi preview`` reports it (see policies/gpu_tenancy_policies/stack.py); otherwise the render's
inputs stand in for the outputs, which echo them. A --resources document with masked secrets
("[secret]") hides those values, so rules that need them skip.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from policies.gpu_tenancy_policies import CONFIG_SCHEMAS, PACK_NAME, POLICIES, default_level

from . import cli
from .harness import SECRET, UNKNOWN
from .render import add_source_arguments, render_from_arguments

LEVELS = {level.value: level for level in EnforcementLevel}


class InputError(Exception):
    """Input the check cannot use (exit status 2)."""


@dataclass(frozen=True)
class Violation:
    level: EnforcementLevel
    policy: str
    urn: str
    message: str

    def __str__(self) -> str:
        return f"{self.level.value} {self.policy} {self.urn}: {self.message}"


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    policies_run: int = 0
    resources: int = 0
    masked: int = 0

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.level == EnforcementLevel.MANDATORY]

    @property
    def exit_code(self) -> int:
        return 1 if self.mandatory else 0


# --- pack config: the JSON `pulumi preview --policy-pack-config` takes --------------------------


def _level(value: Any, where: str) -> EnforcementLevel:
    if not isinstance(value, str) or value not in LEVELS:
        raise InputError(f"{where}: enforcement level must be one of {', '.join(LEVELS)}, not {value!r}")
    return LEVELS[value]


def _config_schema(policy: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**CONFIG_SCHEMAS.get(policy, {}), "enforcementLevel": {"enum": list(LEVELS)}},
    }


def pack_config(document: Any) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """(level, properties with the schema's defaults) per policy, as the engine resolves them.

    ``{"all": "advisory", "shared-datastore": "disabled", "control-plane-exposure":
    {"enforcementLevel": "mandatory", "nodePortMin": 31000}}``: a policy's own entry wins over
    ``all``, which wins over the policy's default level. Unknown policy names are refused rather
    than silently ignored.
    """
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise InputError("policy config must be a JSON object keyed by policy name (or 'all')")
    names = {policy.name for policy in POLICIES}
    unknown = sorted(set(document) - names - {"all"})
    if unknown:
        raise InputError(f"policy config names unknown policies {', '.join(unknown)}; the pack has {', '.join(sorted(names))}")
    everything = document.get("all")
    all_level = None
    if everything is not None:
        all_level = _level(everything.get("enforcementLevel") if isinstance(everything, dict) else everything, "all")
    resolved = {}
    for policy in POLICIES:
        level = all_level or default_level(policy)
        entry = document.get(policy.name, {})
        if isinstance(entry, str):
            level, entry = _level(entry, policy.name), {}
        elif isinstance(entry, dict):
            try:
                jsonschema.validate(entry, _config_schema(policy.name))
            except jsonschema.ValidationError as error:
                location = ".".join(str(part) for part in error.absolute_path)
                raise InputError(f"{policy.name}{'.' + location if location else ''}: {error.message}") from None
            if "enforcementLevel" in entry:
                level = _level(entry["enforcementLevel"], policy.name)
        else:
            raise InputError(f"{policy.name}: must be an enforcement level or an object")
        properties = {key: schema["default"] for key, schema in CONFIG_SCHEMAS.get(policy.name, {}).items()}
        properties.update({key: value for key, value in entry.items() if key != "enforcementLevel"})
        resolved[policy.name] = (level, properties)
    return resolved


# --- the analyzer's view of a rendered document -----------------------------------------------


def _engine_value(value: Any, masked: list[int]) -> Any:
    """Render markers and numbers as the analyzer's values: "[unknown]" is the preview sentinel; a
    masked secret cannot be read either, so it is treated the same (and counted)."""
    if value == UNKNOWN:
        return UNKNOWN_STRING_VALUE
    if value == SECRET:
        masked[0] += 1
        return UNKNOWN_STRING_VALUE
    if isinstance(value, dict):
        return {key: _engine_value(item, masked) for key, item in value.items()}
    if isinstance(value, list):
        return [_engine_value(item, masked) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        # The analyzer decodes every number as a float (protobuf's Struct has only doubles), 22.0 for 22.
        return float(value)
    return value


def _options(parent: str | None) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent)


def _stack_urn(urn: str) -> str:
    stack, project = urn.removeprefix("urn:pulumi:").split("::")[:2]
    return f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"


def _default_provider(record: Mapping[str, Any]) -> PolicyProviderResource | None:
    """The engine hands every custom resource its provider; one set by no one is the package's default."""
    kind = record["type"]
    if not record.get("custom", True) or kind.startswith("pulumi:providers:") or kind.startswith("pulumi:pulumi:"):
        return None
    package = kind.split(":", 1)[0]
    stack, project = record["urn"].removeprefix("urn:pulumi:").split("::")[:2]
    return PolicyProviderResource(
        f"pulumi:providers:{package}",
        unknown_checking_proxy({}),
        f"urn:pulumi:{stack}::{project}::pulumi:providers:{package}::default",
        "default",
    )


@dataclass
class _Analyzed:
    records: list[Mapping[str, Any]]
    resources: list[PolicyResource]  # props = inputs, what resource policies get
    stack_resources: list[PolicyResource]  # props = outputs, what stack policies get
    masked: int


def _has_unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_unknown(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_unknown(item) for item in value)
    return value == UNKNOWN


def engine_outputs(records: list[Mapping[str, Any]], props: Mapping[str, Any]) -> dict[str, Any]:
    """Each resource's outputs as a preview reports them to AnalyzeStack, given its inputs ``props``.

    A provider with an unknown input is not configured in a preview, and the engine returns no
    outputs for what it would create or read (provider_plugin.go, ``Create``/``Read``); the
    outputs of the rest echo their inputs.
    """
    providers = [record for record in records if record["type"].startswith("pulumi:providers:")]
    unconfigured = {record["urn"] for record in providers if _has_unknown(record.get("inputs"))}
    return {record["urn"]: {} if record.get("provider") in unconfigured else props[record["urn"]] for record in records}


# Far deeper than any resource's inputs, and shallow enough for the recursive walks of the inputs
# here and in the policies (Python's recursion limit is 1000 frames).
MAX_INPUT_DEPTH = 100


def _depth(value: Any) -> int:
    """How deep objects and lists nest in ``value``, counted without recursing."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            todo.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def analyze(document: Any) -> _Analyzed:
    """PolicyResource objects linked by parent and dependencies, as AnalyzeStack builds them."""
    if not isinstance(document, dict) or not isinstance(document.get("resources"), list):
        raise InputError('expected a document like tools.render prints: {"resources": [...]}')
    records = document["resources"]
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not all(isinstance(record.get(key), str) for key in ("urn", "type", "name")):
            raise InputError(f"resources[{index}] lacks a string urn, type or name")
        if not record["urn"].startswith("urn:pulumi:") or record["urn"].count("::") < 3:
            raise InputError(f"resources[{index}] ({record['name']}): {record['urn']!r} is not a Pulumi URN")
        if not isinstance(record.get("inputs", {}), dict) or not isinstance(record.get("dependencies", []), list):
            raise InputError(f"resources[{index}] ({record['name']}): inputs must be an object and dependencies a list")
        # URNs are looked up by value, so a list or object where one belongs cannot even be compared.
        if not all(isinstance(urn, str) for urn in record.get("dependencies", [])):
            raise InputError(f"resources[{index}] ({record['name']}): dependencies must be a list of URN strings")
        for key in ("parent", "provider"):
            if not isinstance(record.get(key), str | None):
                raise InputError(f"resources[{index}] ({record['name']}): {key} must be a URN string or null")
        if _depth(record.get("inputs", {})) > MAX_INPUT_DEPTH:
            raise InputError(f"resources[{index}] ({record['name']}): inputs nest deeper than {MAX_INPUT_DEPTH} levels")
    masked = [0]
    props = {record["urn"]: _engine_value(record.get("inputs") or {}, masked) for record in records}
    by_urn = {record["urn"]: record for record in records}

    def provider_of(record: Mapping[str, Any]) -> PolicyProviderResource | None:
        urn = record.get("provider")
        if urn and urn in by_urn:
            provider = by_urn[urn]
            return PolicyProviderResource(provider["type"], unknown_checking_proxy(props[urn]), urn, provider["name"])
        return _default_provider(record)

    def linked(values: Mapping[str, Any], records: list[Mapping[str, Any]]) -> list[PolicyResource]:
        resources = [
            PolicyResource(
                record["type"],
                unknown_checking_proxy(values[record["urn"]]),
                record["urn"],
                record["name"],
                _options(record.get("parent")),
                provider_of(record),
                None,
                [],
                {},
            )
            for record in records
        ]
        by_resource_urn = {resource.urn: resource for resource in resources}
        for record, resource in zip(records, resources, strict=True):
            resource.parent = by_resource_urn.get(record.get("parent") or "")
            resource.dependencies = [by_resource_urn[urn] for urn in record.get("dependencies", []) if urn in by_resource_urn]
        return resources

    # AnalyzeStack gets what the program registered: the engine keeps no goal for a read, so reads
    # are not among the stack's resources, and links to them are dropped (as pulumi_policy drops
    # dependencies it cannot resolve).
    registered = [record for record in records if "read" not in record]
    return _Analyzed(records, linked(props, records), linked(engine_outputs(records, props), registered), masked[0])


def check_document(document: Any, policy_config: Any = None) -> Report:
    """Every policy of the pack against a rendered document, at the levels ``policy_config`` sets."""
    config = pack_config(policy_config)
    analyzed = analyze(document)
    report = Report(resources=len(analyzed.resources), masked=analyzed.masked)
    stack_urn = _stack_urn(analyzed.resources[0].urn) if analyzed.resources else ""
    for policy in POLICIES:
        level, properties = config[policy.name]
        if level == EnforcementLevel.DISABLED:
            continue
        if level == EnforcementLevel.REMEDIATE:
            level = EnforcementLevel.MANDATORY  # the analyzer reports remaining violations as mandatory
        report.policies_run += 1
        if isinstance(policy, ResourceValidationPolicy):
            for record, resource in zip(analyzed.records, analyzed.resources, strict=True):
                if "read" in record:
                    continue  # reads are not registrations; the engine analyzes what it creates or updates
                args = ResourceValidationArgs(
                    resource.resource_type,
                    resource.props,
                    resource.urn,
                    resource.name,
                    resource.opts,
                    resource.provider,
                    properties,
                )
                _evaluate(report, policy, level, resource.urn, args)
        else:
            _evaluate(report, policy, level, stack_urn, StackValidationArgs(analyzed.stack_resources, properties))
    return report


def _evaluate(
    report: Report, policy: Policy, level: EnforcementLevel, urn: str, args: ResourceValidationArgs | StackValidationArgs
) -> None:
    """One ``policy.validate`` call, its violations recorded at ``level`` as the analyzer reports them."""

    def report_violation(message: str, violation_urn: str | None = None) -> None:
        # Resource policies always report against the resource; stack policies name one or the stack.
        where = urn if isinstance(args, ResourceValidationArgs) else violation_urn or urn
        report.violations.append(Violation(level, policy.name, where, message))

    try:
        result = policy.validate(args, report_violation)  # type: ignore[arg-type]
        if inspect.isawaitable(result):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(result)
            finally:
                loop.close()
    except UnknownValueError as error:
        # What the analyzer does with a validator that touched an unknown: one advisory line.
        report.violations.append(
            Violation(
                EnforcementLevel.ADVISORY,
                policy.name,
                urn,
                f"can't run policy '{policy.name}' from policy pack '{PACK_NAME}' during preview: {error.message}",
            )
        )


# --- command line --------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"no such {what} file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read {what} file {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{what} file {path} is not JSON: {error}") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise InputError(f"cannot read {what} file {path}: {error}") from None
    except RecursionError:
        raise InputError(f"cannot read {what} file {path}: it is nested too deeply") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.policycheck", description=__doc__.split("\n\n")[0])
    add_source_arguments(parser)
    parser.add_argument("--resources", type=Path, help="check a document in tools.render's JSON format instead of rendering")
    parser.add_argument("--policy-config", type=Path, help="the pack config JSON, as for pulumi preview --policy-pack-config")
    parser.add_argument("--preview", action="store_true", help="render as a preview of a fresh stack: live values unknown")
    args = parser.parse_args(argv)
    if args.resources is not None and (args.stack is not None or args.config is not None or args.preview):
        parser.error("--resources checks a rendered document; it cannot be combined with --stack, --config or --preview")
    try:
        policy_config = _read_json(args.policy_config, "policy config") if args.policy_config else None
        pack_config(policy_config)  # refuse a bad config before spending a render on it
        if args.resources is not None:
            document = _read_json(args.resources, "resources")
        else:
            # The pack sees secret inputs in plain text; so does the check (it never prints them).
            document = render_from_arguments(args, show_secrets=True, preview=args.preview).to_json()
        report = check_document(document, policy_config)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for violation in report.violations:
        print(violation)
    advisory = len(report.violations) - len(report.mandatory)
    print(
        f"policycheck: {len(report.mandatory)} mandatory and {advisory} advisory finding(s) "
        f"from {report.policies_run} policies on {report.resources} resources",
        file=sys.stderr,
    )
    if report.masked:
        print(
            f"policycheck: {report.masked} secret value(s) are masked in {args.resources}; rules that read them skipped "
            "(render with --show-secrets, or use --stack/--config)",
            file=sys.stderr,
        )
    return report.exit_code


if __name__ == "__main__":
    sys.exit(cli.run(main))
