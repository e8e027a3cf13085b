"""How the rules recognise things: resource type tokens, and the few name contracts with the program.

Rules identify resources by type and by what their properties say, not by resource names. The
environment keys and labels are the explicit links the program writes for that purpose, defined
once in gpu_tenancy/conventions.py.
"""

from __future__ import annotations

from typing import Final

from gpu_tenancy import conventions

TENANT_CONTROL_PLANE: Final = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
DATA_STORE: Final = "kubernetes:kamaji.clastix.io/v1alpha1:DataStore"
IP_ADDRESS_POOL: Final = "kubernetes:metallb.io/v1beta1:IPAddressPool"
L2_ADVERTISEMENT: Final = "kubernetes:metallb.io/v1beta1:L2Advertisement"
HELM_RELEASE: Final = "kubernetes:helm.sh/v3:Release"
# Not kubernetes:helm.sh/v4:Chart: that is a component the provider constructs and registers with
# no inputs (pulumi-kubernetes provider/pkg/provider/helm/v4/chart.go), so a rule would see a chart
# without a name or version; the program installs every chart as a v3 Release.
HELM_TYPES: Final = frozenset({HELM_RELEASE})
SECRET: Final = "kubernetes:core/v1:Secret"
RESOURCE_QUOTA: Final = "kubernetes:core/v1:ResourceQuota"
KUBERNETES_PROVIDER: Final = "pulumi:providers:kubernetes"
LOCAL_COMMAND: Final = "command:local:Command"
REMOTE_COMMAND: Final = "command:remote:Command"
COMMAND_TYPES: Final = frozenset({LOCAL_COMMAND, REMOTE_COMMAND})
CONTAINER: Final = "docker:index/container:Container"
REMOTE_IMAGE: Final = "docker:index/remoteImage:RemoteImage"
VOLUME: Final = "docker:index/volume:Volume"

# Labels and environment keys the program writes for the rules to read (one definition, shared).
TENANT_LABEL: Final = conventions.TENANT_LABEL
ROLE_LABEL: Final = conventions.ROLE_LABEL
WORKER_ROLE: Final = conventions.WORKER_ROLE
ENV_TENANT: Final = conventions.ENV_TENANT
ENV_JOIN_ENDPOINT: Final = conventions.ENV_JOIN_ENDPOINT
ENV_NODE: Final = conventions.ENV_NODE
ENV_REGISTER: Final = conventions.ENV_REGISTER
ENV_GPU_CAPACITY: Final = conventions.ENV_GPU_CAPACITY

# Kamaji's defaults: the API server port, the Konnectivity server port, and the DataStore the
# chart creates and assigns to every TCP that names none (charts/kamaji values.yaml
# defaultDatastoreName).
DEFAULT_API_PORT: Final = 6443
DEFAULT_KONNECTIVITY_PORT: Final = 8132
DEFAULT_DATA_STORE: Final = conventions.KAMAJI_DEFAULT_DATA_STORE

# Charts recognised by name (the last path segment of `chart`, so repo/, oci:// and URL forms match).
HAMI_CHART: Final = "hami"
MANAGEMENT_CHARTS: Final = frozenset({"kamaji", "kamaji-etcd"})


def chart_name(chart: object) -> str | None:
    """``hami`` for ``hami``, ``project-hami/hami``, ``oci://host/charts/hami`` or ``…/hami-2.10.0.tgz``."""
    if not isinstance(chart, str) or not chart:
        return None
    last = chart.rstrip("/").rsplit("/", 1)[-1]
    if last.endswith(".tgz"):
        # A packaged chart is <name>-<version>.tgz; the version starts at the last '-' before a digit.
        stem = last.removesuffix(".tgz")
        for index in range(len(stem) - 1, 0, -1):
            if stem[index] == "-" and stem[index + 1 : index + 2].isdigit():
                return stem[:index]
        return stem
    return last
