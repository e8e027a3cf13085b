"""A preview of a fresh stack, as a pull-request check runs it: nothing live exists yet."""

from __future__ import annotations

from tests.conftest import COMMAND, TCP
from tools import harness


def test_preview_of_an_empty_host_succeeds(dev_preview: harness.Render, dev: harness.Render) -> None:
    assert {(r["type"], r["name"]) for r in dev_preview.resources} == {(r["type"], r["name"]) for r in dev.resources}


def test_live_values_stay_unknown_in_preview(dev_preview: harness.Render) -> None:
    spec = dev_preview.one(TCP, "tenant-a")["inputs"]["spec"]
    assert spec["networkProfile"]["address"] == "[unknown]"
    assert dev_preview.outputs["tenants"]["tenant-a"]["endpoint"] == "[unknown]"
    assert dev_preview.outputs["managementKubeconfig"] == "[unknown]"


def test_nothing_is_read_before_it_exists(dev_preview: harness.Render) -> None:
    # The kubeconfig Secrets are read by an id that is an output of their TCP: unknown in a
    # preview of a fresh stack, so the engine defers the read instead of failing to find them.
    # The program makes no invokes at all (the harness fails any invoke).
    reads = {r["name"]: r["read"] for r in dev_preview.resources if "read" in r}
    assert reads == {"tenant-a-admin-kubeconfig": "[unknown]", "tenant-b-admin-kubeconfig": "[unknown]"}
    assert "docker network inspect kind" in dev_preview.one(COMMAND, "gpu-tenancy-management-kind-network")["inputs"]["create"]


def test_nothing_created_has_an_id_or_answers_for_an_unconfigured_provider(dev_preview: harness.Render) -> None:
    # A preview creates nothing, so a new resource's id is unknown: the worker container's id,
    # which keys the join token, stays unknown...
    token_id = dev_preview.one("random:index/randomString:RandomString", "tenant-a-worker-0-token-id")
    assert token_id["inputs"]["keepers"]["machine"] == "[unknown]"
    # ...and a provider whose kubeconfig is unknown answers nothing (provider_plugin.go): the
    # management namespace's name, an output the TCP takes, is unknown too.
    assert dev_preview.one(TCP, "tenant-a")["inputs"]["metadata"]["namespace"] == "[unknown]"
