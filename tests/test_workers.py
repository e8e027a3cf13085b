"""Workers: the machine (a kindest/node container) and the bootstrap (token, discovery hash, join)."""

from __future__ import annotations

import base64
import hashlib
import shlex
import shutil
import subprocess

import pytest
import yaml

from gpu_tenancy import conventions, kubeadm, kubeconfig, versions
from gpu_tenancy.docker_host import ENGINE_SCRIPT
from tests.conftest import COMMAND, CONTAINER, K8S_PROVIDER, SECRET, TCP, dev_config, render_config
from tests.shell import assert_valid_machine_script
from tools import harness, mock_cloud

ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
DOCKER_PROVIDER = "pulumi:providers:docker"
IMAGE = "docker:index/remoteImage:RemoteImage"
BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"


def test_machine_runs_the_way_kind_runs_its_nodes(dev: harness.Render) -> None:
    container = dev.one(CONTAINER, "tenant-a-worker-0")["inputs"]
    assert container["name"] == container["hostname"] == "tenant-a-worker-0"
    assert container["privileged"] is True
    assert container["networksAdvanced"] == [{"name": "kind", "aliases": ["tenant-a-worker-0"]}]
    assert container["tmpfs"] == {"/run": "", "/tmp": ""}
    assert {"containerPath": "/var"} in container["volumes"]
    assert {"hostPath": "/lib/modules", "containerPath": "/lib/modules", "readOnly": True} in container["volumes"]
    assert len(container["volumes"]) == 2 and container["devices"] == []  # overlay2 on ext4, rootful (mock_cloud)
    assert sorted(container["securityOpts"]) == ["apparmor=unconfined", "seccomp=unconfined"]
    assert container["cgroupnsMode"] == "private"
    assert container["removeVolumes"] is True  # the anonymous /var (images, kubelet state) goes with the container
    # kind's commonArgs (pkg/cluster/internal/providers/docker/provision.go): systemd is PID 1, not
    # an engine's default init, and the node comes back after a reboot of the host or dockerd,
    # on-failure:1, where on-failure:0 would mean always.
    assert container["init"] is False and container["tty"] is True
    assert (container["restart"], container["maxRetryCount"]) == ("on-failure", 1)
    # kind's node and the other workers run the same image: removing a worker must not remove it.
    assert dev.one(IMAGE, "tenant-a-worker-0-image")["inputs"]["keepLocally"] is True
    labels = {label["label"]: label["value"] for label in container["labels"]}
    assert labels == {"gpu-tenancy.io/tenant": "tenant-a", "gpu-tenancy.io/role": "worker"}
    assert not any(key.startswith("io.x-k8s.kind") for key in labels)  # `kind delete cluster` would take it


def test_engine_facts_are_read_once_and_feed_every_container(dev: harness.Render) -> None:
    info = dev.one(COMMAND, "gpu-tenancy-docker-host-docker-info")
    assert info["inputs"]["create"] == ENGINE_SCRIPT
    for container in dev.find(CONTAINER):
        assert info["urn"] in container["dependencies"]


def test_images_and_containers_use_the_default_docker_provider(dev: harness.Render, dev_preview: harness.Render) -> None:
    # Configured from the environment, it is known in a preview of an empty host, so the policy
    # pack sees the containers there; the engine script stops a run where it would reach another
    # engine than the docker CLI (tests/test_docker_host.py).
    resources = dev.find(CONTAINER) + dev.find(IMAGE)
    assert len(resources) == 4
    assert all(resource["provider"] is None for resource in resources)
    assert dev.find(DOCKER_PROVIDER) == [] and dev_preview.find(DOCKER_PROVIDER) == []


def test_every_docker_exec_goes_to_the_engine_that_was_checked(dev: harness.Render) -> None:
    info = dev.one(COMMAND, "gpu-tenancy-docker-host-docker-info")
    execs = [command for command in dev.find(COMMAND) if command["inputs"]["create"].startswith("docker exec")]
    assert {command["name"] for command in execs} >= {"tenant-a-worker-0-join", "tenant-b-worker-0-join"}
    for command in execs:
        assert command["inputs"]["environment"]["DOCKER_HOST"] == "unix:///var/run/docker.sock"  # the mock's first line
        assert info["urn"] in command["dependencies"]
        # It is for the docker CLI; the script in the container does not get it.
        assert "DOCKER_HOST" not in command["inputs"]["create"]


def test_the_engine_stays_unknown_in_a_preview_of_an_empty_host(dev_preview: harness.Render) -> None:
    join = dev_preview.one(COMMAND, "tenant-a-worker-0-join")["inputs"]
    assert join["environment"]["DOCKER_HOST"] == "[unknown]"


def test_a_userns_remap_engine_runs_workers_in_the_host_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    # dockerd refuses --privileged in a remapped user namespace ("privileged mode is incompatible
    # with user namespaces"); kind passes --userns=host there.
    monkeypatch.setattr(
        mock_cloud,
        "DOCKER_INFO",
        '{"driver":"overlay2","driverStatus":[["Backing Filesystem","extfs"]],'
        '"securityOptions":["name=apparmor","name=seccomp,profile=builtin","name=userns","name=cgroupns"]}',
    )
    container = render_config(dev_config()).one(CONTAINER, "tenant-a-worker-0")["inputs"]
    assert container["usernsMode"] == "host"
    assert container["privileged"] is True


def test_an_engine_without_userns_remap_keeps_dockers_default(dev: harness.Render) -> None:
    assert all("usernsMode" not in container["inputs"] for container in dev.find(CONTAINER))


def test_containers_mount_what_the_engine_needs_as_kind_does(monkeypatch: pytest.MonkeyPatch) -> None:
    # Docker on btrfs, rootless: kind adds /dev/mapper (else kubelet: "failed to get rootfs info")
    # and /dev/fuse (fuse-overlayfs).
    monkeypatch.setattr(
        mock_cloud,
        "DOCKER_INFO",
        '{"driver":"overlay2","driverStatus":[["Backing Filesystem","btrfs"]],'
        '"securityOptions":["name=seccomp,profile=builtin","name=rootless"]}',
    )
    render = render_config(dev_config(), show_secrets=True)
    container = render.one(CONTAINER, "tenant-a-worker-0")["inputs"]
    assert {"hostPath": "/dev/mapper", "containerPath": "/dev/mapper"} in container["volumes"]
    # Docker's default permissions, explicit: unset, a refresh reads "rwm" back and replaces the container.
    assert container["devices"] == [{"hostPath": "/dev/fuse", "containerPath": "/dev/fuse", "permissions": "rwm"}]
    # Rootless, as kind runs its nodes: kubelet in a user namespace, kube-proxy leaving the
    # conntrack TCP timeouts alone (the sysctls are hidden there).
    patches = render.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    assert {"op": "add", "path": "/featureGates", "value": {"KubeletInUserNamespace": True}} in patches
    proxy = render.one("kubernetes:core/v1:ConfigMapPatch", "tenant-a-kube-proxy-config")["inputs"]["binaryData"]
    conntrack = yaml.safe_load(base64.b64decode(next(iter(proxy.values()))))["conntrack"]
    assert conntrack == {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"}


def test_a_rootful_engine_gets_no_rootless_settings(dev: harness.Render) -> None:
    patches = dev.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    assert not [patch for patch in patches if patch["path"] == "/featureGates"]


def test_machine_image_is_pulled_at_the_tenant_version() -> None:
    config = dev_config()
    config["tenants"][1]["kubernetesVersion"] = "v1.35.7"
    render = render_config(config)
    # The default version by kind v0.33.0's digest (kind re-tags images); others by tag.
    pinned = render.one("docker:index/remoteImage:RemoteImage", "tenant-a-worker-0-image")
    assert pinned["inputs"]["name"] == f"kindest/node:v1.36.4@{versions.DEFAULT_NODE_IMAGE_DIGEST}"
    image = render.one("docker:index/remoteImage:RemoteImage", "tenant-b-worker-0-image")
    assert image["inputs"]["name"] == "kindest/node:v1.35.7"
    container = render.one(CONTAINER, "tenant-b-worker-0")
    assert image["urn"] in container["dependencies"]
    assert container["inputs"]["image"].startswith("sha256:")


def test_machine_waits_for_the_kind_network(dev: harness.Render) -> None:
    container = dev.one(CONTAINER, "tenant-b-worker-0")
    assert dev.one(COMMAND, "gpu-tenancy-management-kind-network")["urn"] in container["dependencies"]


def test_a_container_is_made_or_replaced_only_once_its_control_plane_is_ready(dev: harness.Render) -> None:
    # A version bump replaces the container (its image changes), delete-first: waiting for the
    # TCP's update keeps the old node until the control plane runs the new version.
    container = dev.one(CONTAINER, "tenant-a-worker-0")
    assert dev.one(TCP, "tenant-a")["urn"] in container["dependencies"]
    assert not dev.waits_for(container, dev.one(TCP, "tenant-b"))
    # The node image is pulled meanwhile.
    image = dev.one("docker:index/remoteImage:RemoteImage", "tenant-a-worker-0-image")
    assert not dev.waits_for(image, dev.one(TCP, "tenant-a"))


def token_secret(render: harness.Render, worker: str) -> dict:
    return render.one(SECRET, f"{worker}-bootstrap-token")


def test_bootstrap_token_secret_format(dev_secrets: harness.Render) -> None:
    secret = token_secret(dev_secrets, "tenant-a-worker-0")
    data = secret["inputs"]["stringData"]
    token_id = data["token-id"]
    assert kubeadm.TOKEN_ID_PATTERN.match(token_id)
    assert kubeadm.TOKEN_SECRET_PATTERN.match(data["token-secret"])
    assert secret["inputs"]["metadata"]["name"] == f"bootstrap-token-{token_id}"
    assert secret["inputs"]["metadata"]["namespace"] == "kube-system"
    assert secret["inputs"]["type"] == "bootstrap.kubernetes.io/token"
    assert data["usage-bootstrap-authentication"] == "true"
    assert data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert data["expiration"] == "2026-12-02T00:00:00Z"
    assert set(data) == {
        "token-id", "token-secret", "expiration", "description", "auth-extra-groups",
        "usage-bootstrap-authentication", "usage-bootstrap-signing",
    }  # fmt: skip
    assert secret["provider"] == dev_secrets.one(K8S_PROVIDER, "tenant-a")["urn"]


@pytest.mark.parametrize(
    ("token_id", "token_secret"),
    [
        ("abc12", "0123456789abcdef"),
        ("abcdefg", "0123456789abcdef"),
        ("ABCDEF", "0123456789abcdef"),
        ("abcdef", "0123456789abcde"),
        ("abcdef", "0123456789abcdeF"),
        ("abcdef", "0123456789abcdef0"),
    ],
)
def test_a_malformed_token_never_becomes_a_secret(token_id: str, token_secret: str) -> None:
    # The API server would accept the Secret, and kubeadm's join then fail much later with no reason given.
    with pytest.raises(ValueError, match=r"\[a-z0-9\]\{6\} and secret \[a-z0-9\]\{16\}"):
        kubeadm.bootstrap_token_secret(token_id, token_secret, "2026-12-02T00:00:00Z", "join")
    assert kubeadm.bootstrap_token_secret("abcdef", "0123456789abcdef", "2026-12-02T00:00:00Z", "join")["token-id"] == "abcdef"


def test_token_is_never_in_plain_text(dev: harness.Render) -> None:
    assert token_secret(dev, "tenant-a-worker-0")["inputs"]["stringData"] == "[secret]"
    join = dev.one(COMMAND, "tenant-a-worker-0-join")["inputs"]
    assert join["stdin"] == "[secret]"
    assert "JOIN_TOKEN" not in join["environment"]
    assert "JOIN_TOKEN" not in join["create"]
    random_secret = dev.one("random:index/randomString:RandomString", "tenant-a-worker-0-token-secret")
    assert random_secret["inputs"]["length"] == 16
    # The secret half is encrypted in the stack's state too, not only masked in output.
    assert random_secret["options"]["additionalSecretOutputs"] == ["result"]


def token_id_value(render: harness.Render) -> str:
    return token_secret(render, "tenant-a-worker-0")["inputs"]["metadata"]["name"].removeprefix("bootstrap-token-")


def test_token_lives_in_state_and_changes_only_with_the_machine_endpoint_or_ca(dev: harness.Render) -> None:
    # A re-join more than a day later (a new endpoint, or a new CA behind the same one) must not
    # present a token the tokencleaner removed.
    container = dev.one(CONTAINER, "tenant-a-worker-0")
    join = dev.one(COMMAND, "tenant-a-worker-0-join")
    ca_cert_hash = join["inputs"]["environment"][conventions.ENV_JOIN_CA_CERT_HASH]
    assert ca_cert_hash.startswith("sha256:")
    keepers = {"machine": "tenant-a-worker-0-id", "endpoint": "172.18.255.230:6443", "ca": ca_cert_hash}
    for name in ("tenant-a-worker-0-token-id", "tenant-a-worker-0-token-secret"):
        token = dev.one("random:index/randomString:RandomString", name)
        assert token["inputs"]["special"] is False and token["inputs"]["upper"] is False
        assert token["inputs"]["keepers"] == keepers
        assert container["urn"] in token["dependencies"]
    expiry = dev.one("time:index/offset:Offset", "tenant-a-worker-0-token-expiry")
    assert expiry["inputs"]["offsetHours"] == 24
    # A replaced token id (the way out of a join that came after the expiry) gets a new expiry too.
    token_id = dev.one("random:index/randomString:RandomString", "tenant-a-worker-0-token-id")
    assert expiry["inputs"]["triggers"] == {**keepers, "token": token_id_value(dev)}
    assert token_id["urn"] in expiry["dependencies"]


def _der_element(data: bytes, offset: int) -> tuple[int, int, int]:
    """(tag, start of content, end of element) of the DER element at ``offset``."""
    tag, length = data[offset], data[offset + 1]
    start = offset + 2
    if length & 0x80:
        size = length & 0x7F
        length = int.from_bytes(data[start : start + size], "big")
        start += size
    return tag, start, start + length


def raw_subject_public_key_info(der: bytes) -> bytes:
    """The certificate's SubjectPublicKeyInfo bytes exactly as stored (RFC 5280 field order)."""
    _, tbs_start, _ = _der_element(der, 0)  # Certificate
    _, position, _ = _der_element(der, tbs_start)  # TBSCertificate content
    if der[position] == 0xA0:  # [0] version
        position = _der_element(der, position)[2]
    for _ in range(5):  # serialNumber, signature, issuer, validity, subject
        position = _der_element(der, position)[2]
    return der[position : _der_element(der, position)[2]]


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_discovery_hash_matches_an_independent_computation(dev_secrets: harness.Render, tenant: str) -> None:
    tenant_config = dev_secrets.one(K8S_PROVIDER, tenant)["inputs"]["kubeconfig"]
    ca_pem = kubeconfig.ca_certificate(tenant_config)
    der = base64.b64decode("".join(line for line in ca_pem.splitlines() if "-----" not in line))
    expected = "sha256:" + hashlib.sha256(raw_subject_public_key_info(der)).hexdigest()
    worker = f"{tenant}-worker-0"
    join = dev_secrets.one(COMMAND, f"{worker}-join")["inputs"]
    assert join["environment"]["JOIN_CA_CERT_HASH"] == expected
    if shutil.which("openssl"):  # kubeadm's documented recipe
        pubkey = subprocess.run(["openssl", "x509", "-pubkey", "-noout"], input=ca_pem.encode(), capture_output=True, check=True)
        spki = subprocess.run(
            ["openssl", "pkey", "-pubin", "-outform", "der"], input=pubkey.stdout, capture_output=True, check=True
        )
        assert expected == "sha256:" + hashlib.sha256(spki.stdout).hexdigest()


def test_join_runs_kubeadm_in_the_container_against_the_tenant_vip(dev_secrets: harness.Render) -> None:
    join = dev_secrets.one(COMMAND, "tenant-a-worker-0-join")["inputs"]
    passed = "-e GPU_TENANCY_TENANT -e JOIN_ENDPOINT -e JOIN_CA_CERT_HASH -e BOOTSTRAP_TOKEN_EXPIRES"
    assert join["create"] == f"docker exec -i {passed} tenant-a-worker-0 sh -s"
    assert join["environment"]["JOIN_ENDPOINT"] == "172.18.255.230:6443"
    # The token Secret's own expiration, so that a join first run after it stops and says so.
    token_data = token_secret(dev_secrets, "tenant-a-worker-0")["inputs"]["stringData"]
    assert join["environment"]["BOOTSTRAP_TOKEN_EXPIRES"] == token_data["expiration"]
    assert "pulumi up --replace '<urn of tenant-a-worker-0-token-id>'" in join["stdin"]
    assert join["environment"]["GPU_TENANCY_TENANT"] == "tenant-a"
    token_data = token_secret(dev_secrets, "tenant-a-worker-0")["inputs"]["stringData"]
    token = f"{token_data['token-id']}.{token_data['token-secret']}"
    assert join["stdin"].startswith(f"JOIN_TOKEN={token}\n")
    script = join["stdin"]
    # The token reaches kubeadm in a JoinConfiguration file, never as an argument.
    assert 'kubeadm join --config "$config" --ignore-preflight-errors=SystemVerification; then\n' in script
    assert 'apiServerEndpoint: "$JOIN_ENDPOINT"\n    token: "$JOIN_TOKEN"\n' in script
    assert 'caCertHashes: ["$JOIN_CA_CERT_HASH"]\n' in script
    assert "apiVersion: kubeadm.k8s.io/v1beta4\n" in script
    assert "--node-labels=gpu=on,gpu-tenancy.io/tenant=tenant-a" in script
    assert "kubeadm reset --force" in join["delete"]


def test_join_reruns_only_when_token_endpoint_or_machine_change(dev_secrets: harness.Render) -> None:
    join = dev_secrets.one(COMMAND, "tenant-a-worker-0-join")["inputs"]
    token_data = token_secret(dev_secrets, "tenant-a-worker-0")["inputs"]["stringData"]
    container = dev_secrets.one(CONTAINER, "tenant-a-worker-0")
    assert join["triggers"] == [
        f"{token_data['token-id']}.{token_data['token-secret']}",
        "172.18.255.230:6443",
        "tenant-a-worker-0-id",
    ]
    assert container["urn"] in dev_secrets.one(COMMAND, "tenant-a-worker-0-join")["dependencies"]


def test_joins_show_kubeadms_progress_but_kinds_kubeconfig_is_never_logged(dev: harness.Render) -> None:
    # kubeadm writes its phases to stdout; kind's command prints the management kubeconfig there.
    machine_steps = [r for r in dev.find(COMMAND) if r["name"].endswith(("-join", "-gpu-registration"))]
    assert len(machine_steps) == 4 and {r["inputs"]["logging"] for r in machine_steps} == {"stdoutAndStderr"}
    assert dev.one(COMMAND, "gpu-tenancy-management-kind-cluster")["inputs"]["logging"] == "stderr"


def test_join_waits_for_its_tcp_and_its_token(dev: harness.Render) -> None:
    join = dev.one(COMMAND, "tenant-a-worker-0-join")
    assert dev.waits_for(join, dev.one(TCP, "tenant-a"))
    assert token_secret(dev, "tenant-a-worker-0")["urn"] in join["dependencies"]
    assert dev.one(BINDING, "tenant-a-bootstrap-config-reader")["urn"] in join["dependencies"]
    assert not dev.waits_for(join, dev.one(TCP, "tenant-b"))


def test_bootstrappers_and_nodes_may_read_exactly_the_join_configmaps(dev: harness.Render) -> None:
    # Nodes read them in `kubeadm upgrade node`, with kubelet.conf.
    role = dev.one(ROLE, "tenant-a-bootstrap-config-reader")["inputs"]
    assert role["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kubeadm-config", "kubelet-config"], "verbs": ["get"]}
    ]
    binding = dev.one(BINDING, "tenant-a-bootstrap-config-reader")["inputs"]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:bootstrappers:kubeadm:default-node-token"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"},
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert dev.one(ROLE, "tenant-a-bootstrap-config-reader")["provider"] == dev.one(K8S_PROVIDER, "tenant-a")["urn"]


def test_a_leaving_worker_resets_kubeadm_and_gets_no_right_to_delete_nodes(dev: harness.Render) -> None:
    # Node self-deletion was withdrawn upstream (a node re-registering sheds its taints); the
    # machine never holds admin credentials, so its Node stays, NotReady.
    join = dev.one(COMMAND, "tenant-a-worker-0-join")
    assert join["inputs"]["delete"] == (
        "docker exec tenant-a-worker-0 sh -c "
        "'kubeadm reset --force && rm -rf /etc/cni/net.d /var/lib/cni && "
        "{ [ ! -f /etc/gpu-tenancy/joined ] || mv -f /etc/gpu-tenancy/joined /etc/gpu-tenancy/left; }' || true"
    )
    assert dev.find("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole") == []
    assert "NodeRestriction" in dev.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["admissionControllers"]


def test_nested_nodes_get_kinds_kubelet_settings(dev: harness.Render) -> None:
    patches = dev.one(TCP, "tenant-a")["inputs"]["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    # kind's kubelet settings for nodes in containers: swap is the host's, and the node's disk is the
    # host's too, so neither image GC nor disk-pressure eviction may act on what the host reports.
    assert patches == [
        {"op": "add", "path": "/cgroupDriver", "value": "systemd"},
        {"op": "add", "path": "/failSwapOn", "value": False},
        {"op": "add", "path": "/imageGCHighThresholdPercent", "value": 100},
        {
            "op": "add",
            "path": "/evictionHard",
            "value": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
        },
    ]


def test_fixed_names_are_freed_before_a_replacement_is_made(dev: harness.Render) -> None:
    # A container name is unique on the engine, and a replaced join's old `kubeadm reset` must run
    # before the new join, not after it: both replace delete-first.
    assert dev.one(CONTAINER, "tenant-a-worker-0")["options"]["deleteBeforeReplace"] is True
    for step in ("join", "gpu-registration"):
        assert dev.one(COMMAND, f"tenant-a-worker-0-{step}")["options"]["deleteBeforeReplace"] is True


@pytest.mark.parametrize("script", ["stdin", "delete"])
def test_machine_scripts_are_valid_posix_shell(dev_secrets: harness.Render, script: str) -> None:
    commands = [command for command in dev_secrets.find(COMMAND) if command["name"].startswith("tenant-")]
    assert commands
    for command in commands:
        text = command["inputs"][script]
        if script == "delete":
            text = shlex.split(text.split(" sh -c ", 1)[1].rsplit(" || true", 1)[0])[0]
        assert_valid_machine_script(text)


def test_every_command_line_is_valid_shell(dev_secrets: harness.Render) -> None:
    # pulumi-command runs create, update and delete with `/bin/sh -c`.
    lines = [
        command["inputs"][key]
        for command in dev_secrets.find(COMMAND)
        for key in ("create", "update", "delete")
        if command["inputs"].get(key)
    ]
    assert len(lines) >= 8
    for line in lines:
        assert_valid_machine_script(line)


def test_workers_of_one_tenant_join_only_that_tenant() -> None:
    config = dev_config()
    config["tenants"][0]["workers"].append({"name": "tenant-a-worker-1"})
    render = render_config(config)
    joins = {c["name"]: c for c in render.find(COMMAND) if c["name"].endswith("-join")}
    assert set(joins) == {"tenant-a-worker-0-join", "tenant-a-worker-1-join", "tenant-b-worker-0-join"}
    extra = joins["tenant-a-worker-1-join"]
    assert render.waits_for(extra, render.one(TCP, "tenant-a"))
    assert not render.waits_for(extra, render.one(TCP, "tenant-b"))
    script = render_config(config, show_secrets=True).one(COMMAND, "tenant-a-worker-1-join")["inputs"]["stdin"]
    assert '--node-labels=gpu-tenancy.io/tenant=tenant-a" > /etc/default/kubelet' in script  # no GPUs, no gpu=on label
    # and off the node, once joined: the worker may have had cards before (the kubelet never removes a label).
    assert "label node tenant-a-worker-1 --overwrite gpu-tenancy.io/tenant=tenant-a gpu-;" in script
