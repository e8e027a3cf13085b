"""HAMi in a tenant: GPU slicing by memory and cores, and the tenant's GPU quota."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpu_tenancy import gpus
from gpu_tenancy.config import Quota
from gpu_tenancy.versions import KUBE_SCHEDULER_REGISTRY, KUBE_SCHEDULER_REPOSITORY

from .helm import chart

HAMI_NAMESPACE = "kube-system"

# HAMi's scheduler locks a node while binding a pod and only a real device plugin's Allocate
# releases the lock (Project-HAMi/HAMi:pkg/util/nodelock/nodelock.go). The mock plugin never does,
# so with the default 5m every second pod on a node waits five minutes. The lock's timestamp has
# one-second resolution; two seconds lets kube-scheduler's retry bind the next pod.
MOCK_NODE_LOCK_EXPIRY = "2s"
# The chart's own scheduler.extender.extraArgs, kept: a list in values replaces the default.
CHART_EXTENDER_ARGS = ("--debug", "-v=4")


def hami_values(kubernetes_version: str, mock_devices: bool, mock_device_plugin_tag: str) -> dict[str, Any]:
    """Values of the ``hami`` chart (v2.10.0 keys, ../shared/schemas/hami/values.yaml)."""
    scheduler: dict[str, Any] = {
        # The chart defaults to registry.cn-hangzhou.aliyuncs.com, often unreachable elsewhere.
        "kubeScheduler": {
            "image": {"registry": KUBE_SCHEDULER_REGISTRY, "repository": KUBE_SCHEDULER_REPOSITORY, "tag": kubernetes_version}
        },
        # The tenant API server calls the webhook through Konnectivity's tunnel to this Service;
        # nothing outside the tenant needs a NodePort.
        "service": {"type": "ClusterIP"},
    }
    values: dict[str, Any] = {
        "scheduler": scheduler,
        # The real plugin needs NVML and a GPU; the mock advertises the registered cards instead.
        # Its vGPU monitor's Service would otherwise be a NodePort (31992) on every GPU host.
        "devicePlugin": {"enabled": not mock_devices, "service": {"type": "ClusterIP"}},
        "mockDevicePlugin": {"enabled": mock_devices},
    }
    if not mock_devices:
        # NVIDIA's runtime is containerd's default on real GPU hosts, so a pod that asks for no GPU
        # but whose image sets NVIDIA_VISIBLE_DEVICES=all (every CUDA image) would see every card,
        # unlimited and uncounted; HAMi's webhook then sets it to none for such containers
        # (HAMi#464, #469).
        scheduler["overwriteEnv"] = "true"
    if mock_devices:
        # The flag, not only the chart's nodeLockExpire: the 2.9 and 2.10 schedulers overwrite the
        # HAMI_NODELOCK_EXPIRE the chart sets with the flag's 5m default (HAMi#2692, #2790).
        # nodeLockExpire stays for schedulers that read the environment.
        scheduler["nodeLockExpire"] = MOCK_NODE_LOCK_EXPIRY
        scheduler["extender"] = {"extraArgs": [*CHART_EXTENDER_ARGS, f"--node-lock-timeout={MOCK_NODE_LOCK_EXPIRY}"]}
        # The chart pulls IfNotPresent even for latest, so each worker keeps the build it pulled
        # first; Always would only refresh it on a pod restart, and such a restart would then fail
        # offline. Pinning latest@sha256:<digest> is the remedy (pinned-versions-exceptions).
        values["mockDevicePlugin"]["image"] = {"tag": mock_device_plugin_tag}
    return values


def quota_hard(quota: Quota) -> dict[str, str]:
    """The only ResourceQuota keys HAMi enforces (Project-HAMi/HAMi:pkg/device/quota.go)."""
    return {
        f"limits.{gpus.GPU_MEMORY_RESOURCE}": str(quota.gpumem),
        f"limits.{gpus.GPU_CORES_RESOURCE}": str(quota.gpucores),
    }


class Hami(pulumi.ComponentResource):
    """The ``hami`` chart through the tenant's provider, after the tenant's nodes exist."""

    release: k8s.helm.v3.Release

    def __init__(
        self,
        name: str,
        version: str,
        kubernetes_version: str,
        mock_devices: bool,
        mock_device_plugin_tag: str,
        quota: Quota | None,
        provider: k8s.Provider,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            "gpu-tenancy:tenant:Hami",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        self.release = chart(
            f"{name}-hami",
            "hami",
            "hami",
            version,
            HAMI_NAMESPACE,
            hami_values(kubernetes_version, mock_devices, mock_device_plugin_tag),
            # Its webhook certificate jobs and scheduler need schedulable, networked nodes.
            pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        if quota is not None:
            namespace_opts = pulumi.ResourceOptions(parent=self)
            if quota.namespace != "default":
                namespace = k8s.core.v1.Namespace(
                    # Not named after the namespace: tenant a's b-jobs and tenant a-b's jobs would collide.
                    # The alias keeps the namespace of a stack made under the old name (whose names
                    # could collide: such a stack cannot add the colliding tenant).
                    f"{name}-quota-namespace",
                    metadata={"name": quota.namespace},
                    # The team's GPU pods run there (the quota bounds nothing else): a quota moved to
                    # another namespace or lifted must not delete them with it. With the tenant the
                    # namespace goes anyway: its cluster does. (A quota put back into it must adopt
                    # it first, README: pulumi-kubernetes refuses to create what exists.)
                    opts=pulumi.ResourceOptions.merge(
                        namespace_opts,
                        pulumi.ResourceOptions(aliases=[pulumi.Alias(name=f"{name}-{quota.namespace}")], retain_on_delete=True),
                    ),
                )
                namespace_opts = pulumi.ResourceOptions(parent=self, depends_on=[namespace])
            k8s.core.v1.ResourceQuota(
                f"{name}-gpu-quota",
                metadata={"name": "gpu-quota", "namespace": quota.namespace},
                spec={"hard": quota_hard(quota)},
                opts=namespace_opts,
            )
        self.register_outputs({})
