"""A tenant's control plane: a Kamaji TenantControlPlane behind a fixed LoadBalancer VIP."""

from __future__ import annotations

import base64
import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes import _utilities as k8s_utilities

from gpu_tenancy import kubeadm, kubeconfig
from gpu_tenancy.config import Tenant
from gpu_tenancy.conventions import KAMAJI_DEFAULT_DATA_STORE, TENANT_LABEL

from .tenant_datastore import DedicatedDataStore

API_PORT = 6443
KONNECTIVITY_PORT = 8132


def ready_when(kubernetes_version: str, data_store: str) -> str:
    """The TCP's ``pulumi.com/waitFor``: Ready at the requested version, with its addons.

    Kamaji's TCP has no conditions; its own e2e waits on the version status
    (clastix/kamaji:e2e/utils_test.go). After a version bump that status is still Ready from the
    old version when the update returns, and Kamaji writes the running version only once the
    upgrade is done, so the version is part of the wait: the workers of the new version join
    only then. The kube-proxy addon must exist too, since the tenant's network patches it; so must
    Konnectivity's server, through which alone the API server reaches the HAMi webhook. Kamaji sets
    ``konnectivity.enabled`` when it adds the server to the control plane, not when the agents run
    in the tenant (clastix/kamaji internal/resources/konnectivity): they need the workers and Calico,
    which come later in the same ``up``; ``make validate`` checks them.

    The DataStore is part of it for the same reason: after a change of ``spec.dataStore`` the
    status is still Ready, while Kamaji copies the tenant's data from the old store to the new one
    (a migration Job); it writes the new store's name into ``status.storage`` only once that is
    done (clastix/kamaji internal/resources/datastore). Without this wait, the same ``up`` would
    remove a dedicated store that Kamaji is still copying from.
    """
    return json.dumps(
        [
            "jsonpath={.status.kubernetesResources.version.status}=Ready",
            f"jsonpath={{.status.kubernetesResources.version.version}}={kubernetes_version}",
            "jsonpath={.status.addons.kubeProxy.enabled}=true",
            "jsonpath={.status.addons.konnectivity.enabled}=true",
            f"jsonpath={{.status.storage.dataStoreName}}={data_store}",
        ]
    )


# Kubelet settings for nodes that are containers (kindest/node): the values kind itself uses, since
# a laptop has swap and often a fuller disk than kubelet's eviction defaults tolerate.
NESTED_KUBELET_PATCHES: list[dict[str, Any]] = [
    {"op": "add", "path": "/failSwapOn", "value": False},
    {"op": "add", "path": "/imageGCHighThresholdPercent", "value": 100},
    {
        "op": "add",
        "path": "/evictionHard",
        "value": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
    },
]
# On a rootless engine the nodes run in a user namespace, where kubelet cannot write kernel
# settings; kind enables this gate for them (kubernetes-sigs/kind:pkg/cluster/internal/kubeadm/
# config.go, RootlessProvider). Kamaji uploads no featureGates, so "add" creates the map.
ROOTLESS_KUBELET_PATCHES: list[dict[str, Any]] = [
    {"op": "add", "path": "/featureGates", "value": {"KubeletInUserNamespace": True}},
]


# Kamaji's default admission controllers (the TCP CRD's default for
# spec.kubernetes.admissionControllers) leave out NodeRestriction, which kubeadm always enables:
# without it a kubelet may change any Node, its labels and its taints, and so steer another
# node's pods or rewrite its GPU registration. Setting the list replaces the default, so it is
# repeated here with NodeRestriction added.
ADMISSION_CONTROLLERS: list[str] = [
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "NodeRestriction",
    "PersistentVolumeClaimResize",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionWebhook",
]


def control_plane_spec(
    tenant: Tenant,
    vip: pulumi.Input[str] | None,
    konnectivity_version: str | None,
    nested_nodes: bool,
    data_store: str,
    rootless: pulumi.Input[bool] = False,
) -> dict[str, Any]:
    """The TenantControlPlane ``spec`` (kamaji.clastix.io/v1alpha1).

    Without a ``vip`` the management cluster's own LoadBalancer picks the address, which Kamaji
    then reports as the control plane endpoint.
    """
    konnectivity: dict[str, Any] = {"server": {"port": KONNECTIVITY_PORT}, "agent": {"mode": "DaemonSet"}}
    if konnectivity_version:
        konnectivity["server"]["version"] = konnectivity_version
        konnectivity["agent"]["version"] = konnectivity_version
    # "add", not "replace": Kamaji writes no cgroupDriver unless the deprecated kubelet.cgroupfs is
    # set, and "replace" fails on a missing key (clastix/kamaji#1310 fixed its own sample so).
    patches = [{"op": "add", "path": "/cgroupDriver", "value": "systemd"}]
    if nested_nodes:
        patches += NESTED_KUBELET_PATCHES
    kubelet_patches = pulumi.Output.from_input(rootless).apply(
        lambda in_user_namespace: patches + ROOTLESS_KUBELET_PATCHES if nested_nodes and in_user_namespace else patches
    )
    service_metadata: dict[str, Any] = {"labels": {TENANT_LABEL: tenant.name}}
    network_profile: dict[str, Any] = {
        "port": API_PORT,
        "podCidrs": [str(tenant.pod_cidr)],
        "serviceCidrs": [str(tenant.service_cidr)],
        # The address Kamaji's webhook would choose (the CIDR's 10th), set here so that it moves with
        # the CIDR: the webhook picks it only on create but checks on every update that it lies
        # inside serviceCidrs (clastix/kamaji internal/webhook/handlers tcp_defaults.go, tcp_dns.go).
        "dnsServiceIPs": [str(tenant.service_cidr[10])],
    }
    if vip is not None:
        # MetalLB reads the requested address from this annotation from 0.14.9 on (config refuses older charts).
        service_metadata["annotations"] = {"metallb.io/loadBalancerIPs": vip}
        network_profile["address"] = vip
    spec: dict[str, Any] = {
        "controlPlane": {
            "deployment": {
                # One management node: a second replica costs memory and buys no availability.
                "replicas": 1,
                "additionalMetadata": {"labels": {TENANT_LABEL: tenant.name}},
                # The control plane's components use the kubeconfigs Kamaji mounts, never the
                # management cluster's API; a token there would only be something to steal.
                "automountServiceAccountToken": False,
            },
            "service": {"serviceType": "LoadBalancer", "additionalMetadata": service_metadata},
        },
        "kubernetes": {
            "version": tenant.kubernetes_version,
            "kubelet": {"configurationJSONPatches": kubelet_patches},
            "admissionControllers": ADMISSION_CONTROLLERS,
        },
        "networkProfile": network_profile,
        "addons": {"coreDNS": {}, "kubeProxy": {}, "konnectivity": konnectivity},
        # Always named, Kamaji's default included: the CRD refuses to unset dataStore, so a TCP
        # created with a dedicated store and switched back to shared could never be updated.
        # Named, the switch is one of Kamaji's DataStore migrations.
        "dataStore": data_store,
    }
    return spec


class _TenantControlPlaneResource(pulumi.CustomResource):
    """The TCP as a custom resource whose ``status`` the program can read.

    The SDK's ``apiextensions.CustomResource`` exposes no ``status``; a ``None`` input is not sent
    to the provider but the engine resolves the output onto it.
    """

    metadata: pulumi.Output[dict[str, Any]]
    status: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, metadata: dict[str, Any], spec: dict[str, Any], opts: pulumi.ResourceOptions) -> None:
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s_utilities.get_version()))
        super().__init__(
            "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane",
            name,
            {
                "apiVersion": "kamaji.clastix.io/v1alpha1",
                "kind": "TenantControlPlane",
                "metadata": metadata,
                "spec": spec,
                "status": None,
            },
            opts,
        )


def _kubeconfig(secret: k8s.core.v1.Secret, key: str) -> pulumi.Output[str]:
    return pulumi.Output.secret(secret.data.apply(lambda data: base64.b64decode(data[key]).decode()))


class TenantControlPlane(pulumi.ComponentResource):
    """Namespace, data store and TCP in the management cluster; the tenant's kubeconfig and provider."""

    kubeconfig: pulumi.Output[str]
    ca_cert_hash: pulumi.Output[str]  # kubeadm's discovery hash of the tenant CA
    endpoint: pulumi.Output[str]  # host:port the workers join
    namespace: str
    provider: k8s.Provider
    # The tenant cluster itself: what lives in it is gone with it (``deleted_with``).
    cluster: pulumi.CustomResource

    def __init__(
        self,
        name: str,
        tenant: Tenant,
        vip: pulumi.Input[str] | None,
        management: k8s.Provider,
        konnectivity_version: str | None,
        nested_nodes: bool,
        data_store_version: str,
        depends_on: list[pulumi.Resource],
        rootless: pulumi.Input[bool] = False,
        management_cluster: pulumi.Resource | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "gpu-tenancy:tenant:TenantControlPlane",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[management])),
        )
        self.namespace = tenant.name
        labels = {TENANT_LABEL: tenant.name}
        # In a cluster that `pulumi destroy` deletes (kind), the namespace, the TCP and its own
        # etcd go with it: nothing waits on Kamaji's finalizers or the etcd chart's teardown hook,
        # and a cluster deleted by hand does not fail the destroy. Removing the tenant alone still
        # deletes them.
        in_management = pulumi.ResourceOptions(parent=self, deleted_with=management_cluster)
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": self.namespace, "labels": labels},
            opts=in_management,
        )
        data_store, prerequisites = self._data_store(name, tenant, namespace, data_store_version, depends_on, in_management)
        tcp = _TenantControlPlaneResource(
            name,
            metadata={
                "name": tenant.name,
                "namespace": namespace.metadata["name"],
                "labels": {**labels, "tenant.clastix.io": tenant.name},
                "annotations": {"pulumi.com/waitFor": ready_when(tenant.kubernetes_version, data_store)},
            },
            spec=control_plane_spec(tenant, vip, konnectivity_version, nested_nodes, data_store, rootless),
            # Kamaji's CRD and webhooks come with its release; the LoadBalancer address with MetalLB's pool.
            # A new version is an update that waits until Kamaji reports it, image pulls included.
            opts=pulumi.ResourceOptions.merge(
                in_management,
                pulumi.ResourceOptions(
                    depends_on=[*depends_on, *prerequisites],
                    custom_timeouts=pulumi.CustomTimeouts(create="20m", update="20m"),
                ),
            ),
        )
        self.cluster = tcp
        # Kamaji names the Secret in the TCP's status; reading it by that output defers the read
        # until the TCP exists, so a preview of a fresh stack does not look for it.
        admin = k8s.core.v1.Secret.get(
            f"{name}-admin-kubeconfig",
            tcp.status.apply(lambda status: f"{self.namespace}/{status['kubeconfig']['admin']['secretName']}"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[tcp]),
        )
        self.kubeconfig = _kubeconfig(admin, "admin.conf")
        # The hash is public (kubeadm prints it); it comes from the secret kubeconfig only because
        # that is where the CA arrives.
        self.ca_cert_hash = pulumi.Output.unsecret(
            self.kubeconfig.apply(lambda config: kubeadm.discovery_token_ca_cert_hash(kubeconfig.ca_certificate(config)))
        )
        # A pinned or planned VIP is known before the TCP exists; otherwise the LoadBalancer's
        # address is, once Kamaji reports it.
        self.endpoint = (
            pulumi.Output.concat(vip, f":{API_PORT}")
            if vip is not None
            else tcp.status.apply(lambda status: status["controlPlaneEndpoint"])
        )
        # The program's own provider uses super-admin.conf (system:masters), as Kamaji itself does:
        # admin.conf works only once Kamaji's soot controller has bound kubeadm:cluster-admins, which
        # it does after the TCP reports Ready, so the first resources could be refused with 403
        # (clastix/kamaji#590; its e2e tests wait "for the Soot controller to set up RBAC").
        self.provider = k8s.Provider(
            name,
            kubeconfig=_kubeconfig(admin, "super-admin.conf"),
            # The cluster is the TCP object: a new server address or CA (Kamaji rotates CAs on
            # request) is the same cluster, and must not replace everything in it (Calico's
            # releases, HAMi, tokens). A TCP that is recreated has a new uid, and is a new cluster.
            # Only the preview of a TCP's creation lacks the uid, when the provider is new anyway.
            cluster_identifier=tcp.metadata.apply(lambda metadata: metadata.get("uid")),
            # No delete_unreachable, as for the kind cluster's provider: a refresh while the tenant's
            # API server restarts must not forget Calico, HAMi and the tokens. What lives in the
            # tenant goes with its TCP (deleted_with), without asking its API server.
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "endpoint": self.endpoint})

    def _data_store(
        self,
        name: str,
        tenant: Tenant,
        namespace: k8s.core.v1.Namespace,
        version: str,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions,
    ) -> tuple[str, list[pulumi.Resource]]:
        """The DataStore the TCP names and what must exist first."""
        if tenant.data_store == "shared":
            return KAMAJI_DEFAULT_DATA_STORE, []
        if tenant.data_store == "dedicated":
            # The chart creates a Kamaji DataStore, whose CRD comes with Kamaji's release.
            store = DedicatedDataStore(name, tenant.name, namespace.metadata["name"], version, depends_on, opts)
            return store.name, [store.release]
        return tenant.data_store, []
