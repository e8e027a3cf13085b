"""The management cluster's machine: a kind cluster the program creates and deletes."""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pulumi_random as random
import yaml

from gpu_tenancy.addressing import inspect_subnets

# kind puts every node on this docker network (KIND_EXPERIMENTAL_DOCKER_NETWORK aside); tenant
# workers join it too, so MetalLB's VIPs are reachable from them and from the host.
KIND_NETWORK = "kind"

# kind honours these from the user's shell; the program assumes docker and the `kind` network.
_KIND_ENVIRONMENT = """unset KIND_EXPERIMENTAL_PROVIDER
export KIND_EXPERIMENTAL_DOCKER_NETWORK=kind
"""

# Which stack a cluster belongs to: a file on its node holding a UUID the stack keeps in its state
# (not the stack's name, which two checkouts with their own local backends share, and which a
# `pulumi stack rename` changes). It is written once `kind create` has succeeded, or on an update of
# this stack's own command when the live cluster is the one its state knows (same CA). Only such a
# cluster is adopted (a create that was interrupted, or whose kubeconfig read failed, is retried by
# the next `pulumi up`) and only such a cluster is deleted: a `kamaji` cluster made by hand, e.g. by
# Kamaji's own kind guide, is the user's. `docker cp` copies the file from a stopped node too.
OWNER_FILE = "/kind/gpu-tenancy-owner"
_COPY_OWNER = f'docker cp "$node:{OWNER_FILE}" "$scratch/owner"'
_MARK = f"""printf '%s\\n' "$KIND_OWNER" | docker exec -i "$node" sh -c 'cat > {OWNER_FILE}'"""
# `kind get clusters` fails when docker does not answer: that must stop the script, not read as
# "no such cluster". Scratch files (kind's throwaway kubeconfig, the owner file) go when it ends.
_START = """scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
clusters="$(kind get clusters)"
node="$KIND_CLUSTER-control-plane"
"""
_EXISTS = 'printf \'%s\\n\' "$clusters" | grep -qx "$KIND_CLUSTER"'
# How a cluster is made anew on purpose, named where the create script refuses to do it itself.
_REPLACE = "pulumi up --replace <urn of $KIND_CLUSTER's *-kind-cluster command> (pulumi stack --show-urns lists it)"
# The CA line of a kubeconfig: a cluster's identity, new with every `kind create`.
_CA = "grep certificate-authority-data"

# The engine the docker CLI, and so kind, talks to: DOCKER_HOST, else the current context's.
_CLI_ENGINE = """engine="${DOCKER_HOST:-}"
[ -n "$engine" ] || engine="$(docker context inspect --format '{{.Endpoints.docker.Host}}' 2>/dev/null || true)"
"""

# Pulumi reaches every tenant API server at its MetalLB VIP on the kind network, so this machine must
# route to container addresses: not so with a remote engine (kind's kubeconfig would point at
# 127.0.0.1 here) nor a rootless one, whose container network lives in RootlessKit's namespace
# (moby/moby#43625). Refused before kind creates anything.
_LOCAL_ROOTFUL_ENGINE = (
    # kind drives Docker only when `docker -v` says so (its docker provider's IsAvailable); else it
    # takes nerdctl or Podman (podman-docker's shim), whose network and info this program cannot read.
    r"""case "$(docker -v 2>/dev/null || true)" in
  "Docker version"*) ;;
  "")
    echo "error: \`docker -v\` answers nothing here: install Docker Engine or Docker Desktop" >&2
    exit 1 ;;
  *)
    echo "error: \`docker\` here is not Docker's CLI ($(docker -v 2>&1 | head -n 1)): kind would take another provider" \
      "(Podman, nerdctl) than the Docker this program drives; use Docker Engine or Docker Desktop" >&2
    exit 1 ;;
esac
"""
    + _CLI_ENGINE
    + """case "$engine" in
  "" | unix://*) ;;
  *)
    echo "error: the docker engine at $engine is not on this machine; Pulumi reaches the tenant API servers" \\
      "at their VIPs on the kind network, so run on the docker host itself" >&2
    exit 1 ;;
esac
if docker info --format '{{json .SecurityOptions}}' | grep -q 'name=rootless'; then
  echo "error: this docker engine is rootless: container addresses, and with them the tenants' VIPs, live in" \\
    "RootlessKit's network namespace and this machine cannot reach them (moby/moby#43625); use a rootful engine" >&2
  exit 1
fi
"""
)

# The kubeconfig goes to stdout and kind's progress to stderr. kind is pointed at a throwaway
# kubeconfig so the user's ~/.kube/config and current context are left alone.
_CREATE = (
    "set -eu\n"
    + _KIND_ENVIRONMENT
    + _LOCAL_ROOTFUL_ENGINE
    + _START
    + f"""if {_EXISTS}; then
  # An update of this stack's own command (pulumi-command passes the previous stdout): the cluster
  # is this stack's if it is still the one whose kubeconfig the state holds.
  if [ -n "${{PULUMI_COMMAND_STDOUT:-}}" ]; then
    live_ca="$(kind get kubeconfig --name "$KIND_CLUSTER" | {_CA} || true)"
    known_ca="$(printf '%s\\n' "$PULUMI_COMMAND_STDOUT" | {_CA} || true)"
    if [ -n "$live_ca" ] && [ "$live_ca" = "$known_ca" ]; then
      {_MARK}
    fi
  fi
  owner=""
  if {_COPY_OWNER} 2>/dev/null; then owner="$(cat "$scratch/owner")"; fi
  if [ "$owner" != "$KIND_OWNER" ]; then
    echo "error: a kind cluster named $KIND_CLUSTER exists but this stack did not create it" \\
      "(its owner: ${{owner:-none, or its creation never finished}}). Delete it with" \\
      "'kind delete cluster --name $KIND_CLUSTER', or set gpu-tenancy:management.name to another name." >&2
    exit 1
  fi
  # A node image the stack no longer names: kind cannot change it in place, and a new cluster
  # would take every tenant's control plane and data with the old one. Only --replace does that.
  running="$(docker inspect --format '{{{{.Config.Image}}}}' "$node")"
  if [ "$running" != "$KIND_NODE_IMAGE" ]; then
    echo "error: kind cluster $KIND_CLUSTER runs $running and this stack asks for $KIND_NODE_IMAGE; kind cannot" \\
      "change a node's image, and a new cluster loses every tenant's control plane and data. Keep this one with" \\
      "gpu-tenancy:management.nodeImage: $running, or replace it on purpose: {_REPLACE}" >&2
    exit 1
  fi
  echo "kind cluster $KIND_CLUSTER already exists and belongs to this stack; adopting it" >&2
else
  # An update of this stack's own command whose cluster is gone (deleted by hand): a new cluster
  # under the same command would keep its providers, and nothing would reinstall what ran on it.
  if [ -n "${{PULUMI_COMMAND_STDOUT:-}}" ]; then
    echo "error: kind cluster $KIND_CLUSTER, which this stack created, is gone; make it and everything in it anew" \\
      "with {_REPLACE}" >&2
    exit 1
  fi
  kind create cluster --name "$KIND_CLUSTER" --config - --kubeconfig "$scratch/kubeconfig" --wait 5m >&2
  {_MARK}
fi
kind get kubeconfig --name "$KIND_CLUSTER"
"""
)

_DELETE = (
    "set -eu\n"
    + _KIND_ENVIRONMENT
    + _START
    # A cluster not found may be gone, or made on the engine of another docker context: say which was asked.
    + _CLI_ENGINE
    + f"""if ! {_EXISTS}; then
  echo "kind cluster $KIND_CLUSTER is already gone from the docker engine at ${{engine:-(unknown)}}; if it was" \\
    "made on another engine (docker context, DOCKER_HOST), delete it there: kind delete cluster --name $KIND_CLUSTER" >&2
  exit 0
fi
owner=""
if {_COPY_OWNER}; then owner="$(cat "$scratch/owner")"; fi
if [ -z "$owner" ]; then
  echo "error: cannot read which stack kind cluster $KIND_CLUSTER belongs to ($node:{OWNER_FILE});" \\
    "if it is this stack's, delete it with 'kind delete cluster --name $KIND_CLUSTER' and run destroy again" >&2
  exit 1
fi
if [ "$owner" != "$KIND_OWNER" ]; then
  echo "warning: kind cluster $KIND_CLUSTER belongs to another stack (its owner: $owner); leaving it" >&2
  exit 0
fi
kind delete cluster --name "$KIND_CLUSTER" --kubeconfig "$scratch/kubeconfig"
"""
)

# Pulumi reaches every tenant API server at its MetalLB VIP on the kind network, so this machine must
# route to that network. An engine in a VM (Docker Desktop on macOS, Windows or Linux; Colima;
# Rancher Desktop) keeps it inside the VM: there `pulumi up` would wait out every tenant's timeouts.
# kind's control-plane node serves its API on that network (port 6443); a machine that cannot open it
# cannot reach a VIP either (MetalLB answers for them on the same bridge). A refusal is an answer from
# the node, so it counts as reachable: only a timeout or no route fails. Python is the one
# prerequisite that can open a socket here (no curl, nc or GNU timeout on every host).
NODE_API_PORT = 6443
_CONNECT = f"""import socket, sys
try:
    socket.create_connection((sys.argv[1], {NODE_API_PORT}), timeout=5).close()
except ConnectionRefusedError:
    pass  # the node answered: the route is there, only its API server is not listening yet
except OSError as error:
    sys.exit(str(error) or type(error).__name__)"""
_NODE_IP = '{{with index .NetworkSettings.Networks "' + KIND_NETWORK + '"}}{{.IPAddress}}{{end}}'
_ROUTE_CHECK = f"""node="$KIND_CLUSTER-control-plane"
node_ip="$(docker inspect --format '{_NODE_IP}' "$node")"
if [ -z "$node_ip" ]; then
  echo "error: kind's node $node has no IPv4 address on the docker network {KIND_NETWORK}" \\
    "(a stopped node has none: docker start $node)" >&2
  exit 1
fi
if ! command -v python3 >/dev/null; then
  echo "error: python3 is not on PATH; it checks that this machine reaches the docker network {KIND_NETWORK}" >&2
  exit 1
fi
attempt=1
until reason="$(python3 -c '{_CONNECT}' "$node_ip" 2>&1)"; do
  if [ "$attempt" -ge 3 ]; then
    echo "error: this machine cannot reach the docker network {KIND_NETWORK}: kind's node $node at $node_ip:{NODE_API_PORT}" \\
      "does not answer ($reason). Pulumi reaches each tenant's API server at its VIP on that network, and an engine" \\
      "in a VM (Docker Desktop, Colima, Rancher Desktop) does not route it to this machine: run on Linux with a" \\
      "native docker engine, or add a route into the VM's docker network (e.g. docker-mac-net-connect)" >&2
    exit 1
  fi
  attempt=$((attempt + 1))
  sleep 2
done
"""
# The subnets once the route is there: IPv4 and, on IPv6-enabled hosts, IPv6; the program picks the IPv4 one.
_INSPECT_NETWORK = "set -eu\n" + _ROUTE_CHECK + inspect_subnets(KIND_NETWORK) + "\n"


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
    # The cluster itself: what the program puts in it goes with it on destroy (``deleted_with``).
    cluster: command.local.Command
    node_subnets: pulumi.Output[str]
    network: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(self, name: str, cluster_name: str, node_image: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpu-tenancy:management:KindCluster", name, None, opts)
        owner = random.RandomUuid(f"{name}-kind-owner", opts=pulumi.ResourceOptions(parent=self))
        cluster = command.local.Command(
            f"{name}-kind-cluster",
            create=_CREATE,
            delete=_DELETE,
            stdin=kind_config(node_image),
            environment={"KIND_CLUSTER": cluster_name, "KIND_OWNER": owner.result, "KIND_NODE_IMAGE": node_image},
            logging=command.local.Logging.STDERR,
            opts=pulumi.ResourceOptions(
                parent=self,
                additional_secret_outputs=["stdout"],
                # A new name is a new cluster. A new node image is an update that the create script
                # refuses (kind cannot change one in place, and a replacement deletes every tenant):
                # a new default in a release must not take the cluster with it; `--replace` does.
                # A new owner is an update too: the create script then marks the cluster it has.
                replace_on_changes=["environment.KIND_CLUSTER"],
                delete_before_replace=True,
            ),
        )
        self.cluster = cluster
        self.kubeconfig = pulumi.Output.secret(cluster.stdout)
        inspect = command.local.Command(
            f"{name}-kind-network",
            create=_INSPECT_NETWORK,
            environment={"KIND_CLUSTER": cluster_name},
            triggers=[cluster.id],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_subnets = inspect.stdout
        self.network = inspect.stdout.apply(lambda _: KIND_NETWORK)
        self.provider = k8s.Provider(
            name,
            kubeconfig=self.kubeconfig,
            # The cluster is the command's: an update of it (its stdout unknown in a preview) is
            # not a new cluster, and only its replacement replaces what runs on it.
            cluster_identifier=cluster.id,
            # No delete_unreachable: with it, a `pulumi refresh` while Docker is stopped would drop
            # everything in the cluster from the state, and the next `pulumi up` collide with it.
            # Upstream keeps it opt-in for that reason (pulumi-kubernetes#2489); a cluster deleted by
            # hand is destroyed with PULUMI_K8S_DELETE_UNREACHABLE=true (README, Troubleshooting).
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "nodeSubnets": self.node_subnets})
