"""The pack as the Pulumi CLI runs it: `python -m pulumi.policy` serving CrossGuard's Analyzer gRPC API.

There is no Pulumi CLI here, so this test plays the engine: it starts policies/ the way the
CLI's Python analyzer plugin does, reads the pack's policies, configures it with the schema's
defaults, and sends renders of the dev stack through Analyze (each resource) and AnalyzeStack
(the whole stack), with secrets and unknowns encoded as the engine encodes them. What the pack
reports must be exactly what `tools.policycheck` reports.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from policies.gpu_tenancy_policies import CONFIG_SCHEMAS, PACK_NAME, POLICY_NAMES
from tests.conftest import COMMAND, PROJECT_DIR, RELEASE, TCP
from tools import harness, policycheck

LEVELS = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.DISABLED: "disabled",
    analyzer_pb2.REMEDIATE: "remediate",
}


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    # The CLI runs `python -u -m pulumi.policy <engine> <pack dir>` from the pack directory; the pack
    # prints its port on stdout and then serves until it is stopped.
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", str(PROJECT_DIR / "policies")],
        cwd=PROJECT_DIR / "policies",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = process.stdout.readline().strip() if process.stdout else ""
        if not port.isdigit():
            process.kill()
            pytest.fail(f"the pack did not start: {port!r} {process.communicate(timeout=30)[1]}")
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=30)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_pack_describes_its_policies(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == PACK_NAME
    assert [policy.name for policy in info.policies] == list(POLICY_NAMES)
    levels = {policy.name: LEVELS[policy.enforcementLevel] for policy in info.policies}
    assert levels == {
        name: "advisory" if name in ("shared-datastore", "pinned-versions-exceptions") else "mandatory" for name in POLICY_NAMES
    }
    schemas = {policy.name: json_format.MessageToDict(policy.configSchema.properties) for policy in info.policies}
    assert schemas["control-plane-exposure"]["nodePortMin"]["default"] == 30000
    assert schemas["privileged-containers-are-nodes"]["nodeImageRepositories"]["default"] == ["kindest/node"]


def _engine_value(masked: Any, shown: Any) -> Any:
    """A property as the engine sends it: unknowns as the sentinel, secrets wrapped in the secret signature."""
    if masked == harness.UNKNOWN:
        return UNKNOWN_STRING_VALUE
    if masked == harness.SECRET:
        # A render that masks this secret too (a preview) cannot say what it is: an unknown secret.
        value = UNKNOWN_STRING_VALUE if shown == harness.SECRET else _engine_value(shown, shown)
        return {rpc._special_sig_key: rpc._special_secret_sig, "value": value}
    if isinstance(masked, dict):
        return {
            key: [_asset(item) for item in item] if key == "valueYamlFiles" else _engine_value(item, shown[key])
            for key, item in masked.items()
        }
    if isinstance(masked, list):
        return [_engine_value(item, other) for item, other in zip(masked, shown, strict=True)]
    return masked


def _asset(recorded: dict) -> dict:
    """A render's ``{"text": ...}`` as the engine sends an asset: with the asset signature."""
    return {rpc._special_sig_key: rpc._special_asset_sig, **recorded}


def _struct(value: dict) -> struct_pb2.Struct:
    return json_format.ParseDict(value, struct_pb2.Struct())


def _provider(document: dict, record: dict, props: dict[str, dict]) -> analyzer_pb2.AnalyzerProviderResource | None:
    by_urn = {item["urn"]: item for item in document["resources"]}
    if record.get("provider") in by_urn:
        provider = by_urn[record["provider"]]
        return analyzer_pb2.AnalyzerProviderResource(
            type=provider["type"], properties=_struct(props[provider["urn"]]), urn=provider["urn"], name=provider["name"]
        )
    if not record.get("custom", True) or record["type"].startswith("pulumi:providers:"):
        return None
    package = record["type"].split(":", 1)[0]
    return analyzer_pb2.AnalyzerProviderResource(
        type=f"pulumi:providers:{package}",
        urn=f"urn:pulumi:dev::gpu-tenancy::pulumi:providers:{package}::default",
        name="default",
    )


def analyze(analyzer: analyzer_pb2_grpc.AnalyzerStub, masked: dict, shown: dict) -> set[tuple[str, str, str, str]]:
    """(level, policy, urn, message) of every diagnostic the pack returns, as the engine would collect them."""
    # The engine configures every policy with its level and the schema's defaults.
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                name: analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.ADVISORY
                    if name in ("shared-datastore", "pinned-versions-exceptions")
                    else analyzer_pb2.MANDATORY,
                    properties=_struct({key: schema["default"] for key, schema in CONFIG_SCHEMAS.get(name, {}).items()}),
                )
                for name in POLICY_NAMES
            }
        )
    )
    shown_by_urn = {record["urn"]: record for record in shown["resources"]}
    props = {
        record["urn"]: _engine_value(record["inputs"], shown_by_urn[record["urn"]]["inputs"]) for record in masked["resources"]
    }
    found: set[tuple[str, str, str, str]] = set()

    def collect(response: analyzer_pb2.AnalyzeResponse, urn: str) -> None:
        for diagnostic in response.diagnostics:
            message = diagnostic.message.removeprefix(diagnostic.description).removeprefix("\n")
            found.add((LEVELS[diagnostic.enforcementLevel], diagnostic.policyName, diagnostic.urn or urn, message))

    # AnalyzeStack gets outputs: none behind a provider a preview cannot configure.
    outputs = policycheck.engine_outputs(masked["resources"], props)
    stack_resources = []
    for record in masked["resources"]:
        options = analyzer_pb2.AnalyzerResourceOptions(parent=record["parent"] or "")
        provider = _provider(masked, record, props)
        properties = _struct(props[record["urn"]])
        if "read" in record:
            continue  # no goal state for a read: neither analyzed nor among the stack's resources
        stack_resources.append(
            analyzer_pb2.AnalyzerResource(
                type=record["type"],
                properties=_struct(outputs[record["urn"]]),
                urn=record["urn"],
                name=record["name"],
                options=options,
                provider=provider,
                parent=record["parent"] or "",
                dependencies=record["dependencies"],
            )
        )
        request = analyzer_pb2.AnalyzeRequest(
            type=record["type"],
            properties=properties,
            urn=record["urn"],
            name=record["name"],
            options=options,
            provider=provider,
        )
        collect(analyzer.Analyze(request), record["urn"])
    stack_urn = "urn:pulumi:dev::gpu-tenancy::pulumi:pulumi:Stack::gpu-tenancy-dev"
    collect(analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=stack_resources)), stack_urn)
    return found


def offline(shown: dict) -> set[tuple[str, str, str, str]]:
    return {(v.level.value, v.policy, v.urn, v.message) for v in policycheck.check_document(shown).violations}


def test_the_dev_stack_through_the_analyzer(
    analyzer: analyzer_pb2_grpc.AnalyzerStub, dev: harness.Render, dev_secrets: harness.Render
) -> None:
    found = analyze(analyzer, dev.to_json(), dev_secrets.to_json())
    assert found, "the dev stack's advisories must be reported"
    assert {level for level, *_ in found} == {"advisory"}
    assert found == offline(dev_secrets.to_json())


def test_a_preview_through_the_analyzer(analyzer: analyzer_pb2_grpc.AnalyzerStub, dev_preview: harness.Render) -> None:
    preview = dev_preview.to_json()
    found = analyze(analyzer, preview, preview)
    assert {level for level, *_ in found} == {"advisory"}
    assert not [message for *_, message in found if "can't run policy" in message]
    assert found == offline(preview)


def test_violations_through_the_analyzer(
    analyzer: analyzer_pb2_grpc.AnalyzerStub, dev: harness.Render, dev_secrets: harness.Render
) -> None:
    # Copies: the renders are session fixtures other tests compare against.
    masked, shown = copy.deepcopy(dev.to_json()), copy.deepcopy(dev_secrets.to_json())

    def change(document: dict, type_: str, name: str) -> dict:
        return next(item for item in document["resources"] if item["type"] == type_ and item["name"] == name)

    for document in (masked, shown):
        change(document, COMMAND, "tenant-a-worker-0-join")["inputs"]["environment"]["JOIN_ENDPOINT"] = "172.18.255.219:6443"
        change(document, RELEASE, "tenant-b-hami")["provider"] = change(document, TCP, "tenant-b")["provider"]
        change(document, TCP, "tenant-b")["inputs"]["spec"]["addons"].pop("konnectivity")
        # pulumi_policy hands a values file over as a StringAsset.
        change(document, RELEASE, "tenant-a-hami")["inputs"]["valueYamlFiles"] = [
            {"text": "devicePlugin:\n  image:\n    tag: latest\n"}
        ]
    # Only visible with secrets: the analyzer unwraps them, so the token rule sees this.
    token = next(item for item in shown["resources"] if item["name"] == "tenant-a-worker-0-bootstrap-token")
    token["inputs"]["stringData"].pop("expiration")

    found = analyze(analyzer, masked, shown)
    mandatory = {policy for level, policy, *_ in found if level == "mandatory"}
    assert mandatory == {
        "tenant-worker-isolation",
        "hami-on-tenants-only",
        "konnectivity-required",
        "bootstrap-token-hygiene",
        "pinned-versions",
    }
    assert ("pinned-versions", "Helm chart hami: valueYamlFiles[0].devicePlugin.image.tag is the moving image tag 'latest'") in {
        (policy, message) for _, policy, _, message in found
    }
    assert found == offline(shown)
