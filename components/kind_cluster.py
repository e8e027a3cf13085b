"""The management cluster's machine: a kind cluster the program creates and deletes."""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import yaml

# kind puts every node on this docker network (KIND_EXPERIMENTAL_DOCKER_NETWORK aside); tenant
# workers join it too, so MetalLB's VIPs are reachable from them and from the host.
KIND_NETWORK = "kind"

# The kubeconfig goes to stdout and kind's progress to stderr. kind is pointed at a throwaway
# kubeconfig so the user's ~/.kube/config and current context are left alone.
_CREATE = """set -eu
kubeconfig="$(mktemp)"
trap 'rm -f "$kubeconfig"' EXIT
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  echo "kind cluster $KIND_CLUSTER already exists; adopting it" >&2
else
  kind create cluster --name "$KIND_CLUSTER" --config - --kubeconfig "$kubeconfig" --wait 5m >&2
fi
kind get kubeconfig --name "$KIND_CLUSTER"
"""

_DELETE = """set -eu
kubeconfig="$(mktemp)"
trap 'rm -f "$kubeconfig"' EXIT
kind delete cluster --name "$KIND_CLUSTER" --kubeconfig "$kubeconfig"
"""

# IPv4 and, on IPv6-enabled hosts, IPv6 subnets; the program picks the IPv4 one.
_INSPECT_NETWORK = "docker network inspect " + KIND_NETWORK + " --format '{{range .IPAM.Config}}{{.Subnet}} {{end}}'"


def kind_config(node_image: str) -> str:
    return yaml.safe_dump(
        {
            "kind": "Cluster",
            "apiVersion": "kind.x-k8s.io/v1alpha4",
            "nodes": [{"role": "control-plane", "image": node_image}],
        },
        sort_keys=False,
    )


class KindCluster(pulumi.ComponentResource):
    """``kind create cluster`` on ``pulumi up``, ``kind delete cluster`` on destroy.

    Everything only the live system knows (the kubeconfig, the docker network's subnet) is an
    output of the command that makes it, so a preview on an empty host never looks it up.
    """

    kubeconfig: pulumi.Output[str]
    node_subnets: pulumi.Output[str]
    network: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, cluster_name: str, node_image: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:management:KindCluster", name, None, opts)
        cluster = command.local.Command(
            f"{name}-kind-cluster",
            create=_CREATE,
            delete=_DELETE,
            stdin=kind_config(node_image),
            environment={"KIND_CLUSTER": cluster_name},
            logging=command.local.Logging.STDERR,
            opts=pulumi.ResourceOptions(
                parent=self,
                additional_secret_outputs=["stdout"],
                # A new node image or name is a new cluster; kind cannot change one in place.
                replace_on_changes=["stdin", "environment"],
                delete_before_replace=True,
            ),
        )
        self.kubeconfig = pulumi.Output.secret(cluster.stdout)
        inspect = command.local.Command(
            f"{name}-kind-network",
            create=_INSPECT_NETWORK,
            triggers=[cluster.id],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_subnets = inspect.stdout
        self.network = inspect.stdout.apply(lambda _: KIND_NETWORK)
        self.provider = k8s.Provider(
            name,
            kubeconfig=self.kubeconfig,
            # A kind cluster deleted by hand must not wedge `pulumi destroy`.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "nodeSubnets": self.node_subnets})
