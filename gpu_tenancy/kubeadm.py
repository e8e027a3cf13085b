"""kubeadm's join material, computed the way kubeadm computes it, without kubeadm on the host."""

from __future__ import annotations

import hashlib
import re
import shlex
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from .conventions import MACHINE_STATE_DIR
from .versions import kubernetes_minor

# kubeadm's default node token group and the usages a join token needs
# (k8s.io/kubernetes:cmd/kubeadm/app/constants NodeBootstrapTokenAuthGroup, DefaultTokenUsages).
NODE_BOOTSTRAP_GROUP: Final = "system:bootstrappers:kubeadm:default-node-token"
# The group of every kubelet's own credentials (constants.NodesGroup).
NODES_GROUP: Final = "system:nodes"
TOKEN_USAGES: Final = ("authentication", "signing")
TOKEN_ID_PATTERN: Final = re.compile(r"^[a-z0-9]{6}$")
TOKEN_SECRET_PATTERN: Final = re.compile(r"^[a-z0-9]{16}$")
BOOTSTRAP_SECRET_TYPE: Final = "bootstrap.kubernetes.io/token"

# Nested kindest/node containers often lack the cpuset cgroup controller, which kubeadm's
# SystemVerification preflight reports as an error; that is the only check a nested node fails.
# (kind skips the whole preflight phase of its own joins, skipPhases in pkg/cluster/internal/
# kubeadm/join.go; Kamaji's e2e ignores SystemVerification and FileExisting.) Real hosts keep every check.
NESTED_NODE_PREFLIGHT_IGNORES: Final = ("SystemVerification",)


def discovery_token_ca_cert_hash(ca_pem: str) -> str:
    """``sha256:<hex>`` over the CA's DER SubjectPublicKeyInfo, as ``kubeadm token create --print-join-command``.

    kubeadm hashes ``x509.Certificate.RawSubjectPublicKeyInfo``
    (k8s.io/kubernetes:cmd/kubeadm/app/util/pubkeypin/pubkeypin.go); DER is canonical, so
    re-encoding the parsed public key yields the same bytes.
    """
    certificate = x509.load_pem_x509_certificate(ca_pem.encode())
    spki = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def bootstrap_token_secret(token_id: str, token_secret: str, expiration: str, description: str) -> dict[str, str]:
    """``stringData`` of Secret ``kube-system/bootstrap-token-<id>`` (k8s.io/cluster-bootstrap/token/api)."""
    if not TOKEN_ID_PATTERN.match(token_id) or not TOKEN_SECRET_PATTERN.match(token_secret):
        raise ValueError("bootstrap token id must be [a-z0-9]{6} and secret [a-z0-9]{16}")
    data = {
        "token-id": token_id,
        "token-secret": token_secret,
        "expiration": expiration,
        "description": description,
        "auth-extra-groups": NODE_BOOTSTRAP_GROUP,
    }
    data.update({f"usage-bootstrap-{usage}": "true" for usage in TOKEN_USAGES})
    return data


def bootstrap_secret_name(token_id: str) -> str:
    return f"bootstrap-token-{token_id}"


# A join that fails (the tenant's RBAC still being set up right after the TCP turns Ready, a kubelet
# that cannot start yet) is retried this often, from a clean slate each time.
JOIN_ATTEMPTS: Final = 5
JOIN_RETRY_SECONDS: Final = 20
# What a machine is joined as: its endpoint, the CA it trusts there and its node name, written by
# the join that made it so.
JOIN_RECORD: Final = f"{MACHINE_STATE_DIR}/joined"
# Undoing a join. kubeadm reset leaves the pod network's configuration ("The reset process does not
# clean CNI configuration", kubernetes/kubernetes cmd/kubeadm/app/cmd/reset.go), with which a
# machine joining another tenant would report Ready and wire pods into the old tenant's network
# until the new one's Calico rewrites it.
RESET_SCRIPT: Final = "kubeadm reset --force && rm -rf /etc/cni/net.d /var/lib/cni"
# What the join a machine last left was made as, kept for the next join to compare.
LEFT_RECORD: Final = f"{MACHINE_STATE_DIR}/left"
# The record goes with the join, once the reset has succeeded (a failed one fails the delete),
# and stays as what the machine left.
LEAVE_SCRIPT: Final = f"{RESET_SCRIPT} && {{ [ ! -f {JOIN_RECORD} ] || mv -f {JOIN_RECORD} {LEFT_RECORD}; }}"
# kubeadm reset removes the pods' containers but neither their images nor their logs
# (kubernetes/kubernetes cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go). On a machine another
# tenant used, this tenant's pods could run that tenant's private images without pulling them
# (IfNotPresent, no pull secret) and read its pods' logs through a hostPath: a join to another
# tenant removes both first. A join to the same one (a new token, a replaced join) keeps them.
CRI_ENDPOINT: Final = "unix:///run/containerd/containerd.sock"
SCRUB_SCRIPT: Final = (
    f"crictl --runtime-endpoint {CRI_ENDPOINT} rmi --all >/dev/null && rm -rf /var/log/pods/* /var/log/containers/*"
)
# A machine that has just started (a new worker container) may still be starting containerd.
RUNTIME_WAIT_SECONDS: Final = 120
# A restarted kubelet reports its version on the Node within seconds of starting.
NODE_UPGRADE_WAIT_SECONDS: Final = 120
# A kubelet that has just joined registers its Node within seconds of its TLS bootstrap.
NODE_REGISTER_WAIT_SECONDS: Final = 120


def join_configuration_api(kubernetes_version: str) -> str:
    """The kubeadm config API of the tenant's kubeadm: v1beta4 from 1.31 on, v1beta3 before."""
    return "kubeadm.k8s.io/v1beta4" if kubernetes_minor(kubernetes_version) >= (1, 31) else "kubeadm.k8s.io/v1beta3"


def join_script(
    node_name: str,
    kubernetes_version: str,
    preflight_ignores: tuple[str, ...],
    node_labels: dict[str, str | None],
    token_resource: str = "the token-id RandomString",
) -> str:
    """A POSIX shell script that joins this machine, reading the secrets from the environment.

    ``JOIN_ENDPOINT``, ``JOIN_TOKEN`` and ``JOIN_CA_CERT_HASH`` come from the environment and
    reach kubeadm in a JoinConfiguration file only root can read, removed on exit: the token is
    never an argument, which any user of the host could read in ``/proc/<pid>/cmdline``. The
    script is idempotent: a machine already joined as this node to the same endpoint and CA (its
    ``JOIN_RECORD``) only gets its labels again (the kubelet applies ``--node-labels`` only when it
    registers a new Node, and never removes one): a label whose value is None is removed from the
    node, so that a worker whose cards left the config leaves HAMi's ``gpu=on`` selector too. A
    fresh join labels the node the same way once it has registered: the Node of a machine joined
    anew (a replaced container, a new host under the same name) outlives the old join, and keeps
    its old labels through the new registration. Anything else is reset first: another endpoint,
    a new CA at the same address (a control plane made anew), or another node name (a worker
    renamed on the same host, whose kubelet could not even label the new name). A machine joined
    before the record existed counts by its endpoint alone and is recorded. A machine that served
    another control plane (another endpoint or CA, joined or left: ``LEFT_RECORD``) loses that
    tenant's images and pod logs before it joins (``SCRUB_SCRIPT``). kubeadm's preflight
    refuses to join over what a failed join leaves (``bootstrap-kubelet.conf``, ``pki/ca.crt``),
    not only over ``kubelet.conf``.

    A token is made once and expires (``BOOTSTRAP_TOKEN_EXPIRES``, RFC 3339 UTC), after which the
    tenant's tokencleaner deletes it; a join first retried after that (a failed ``pulumi up`` run
    again the next day) stops at once and names ``token_resource``, whose replacement makes a new one.

    The target ``kubernetes_version`` is part of the script itself, so a new version changes the
    script and re-runs it in place. (In its environment, which an SSH machine records as a trigger,
    it would replace the join instead, whose delete runs ``kubeadm reset``.) A joined node whose
    kubelet still reports another version is upgraded as kubeadm's guide for Linux nodes does, the
    packages being already at the target: ``kubeadm upgrade node``, then a restart of the kubelet.
    The join runs after its control plane is Ready at that version, so the node never runs ahead of it.
    """
    ignore = f" --ignore-preflight-errors={','.join(preflight_ignores)}" if preflight_ignores else ""
    api = join_configuration_api(kubernetes_version)
    wanted = {key: value for key, value in sorted(node_labels.items()) if value is not None}
    removed = sorted(key for key, value in node_labels.items() if value is None)
    labels = ",".join(f"{key}={value}" for key, value in wanted.items())
    label_args = " ".join(
        [*(shlex.quote(f"{key}={value}") for key, value in wanted.items()), *(shlex.quote(f"{key}-") for key in removed)]
    )
    node = shlex.quote(node_name)
    version = shlex.quote(kubernetes_version)
    return f"""set -eu
: "${{JOIN_ENDPOINT:?}}" "${{JOIN_TOKEN:?}}" "${{JOIN_CA_CERT_HASH:?}}"
target_version={version}
# The kubelet sets these labels itself whenever it (re-)registers the node; keep the flags the
# image or distribution already put in /etc/default/kubelet (kind sets --runtime-cgroups there).
extra="$(sed -n 's/^KUBELET_EXTRA_ARGS=//p' /etc/default/kubelet 2>/dev/null | sed 's/ *--node-labels=[^ ]*//g')"
echo "KUBELET_EXTRA_ARGS=${{extra:+$extra }}--node-labels={labels}" > /etc/default/kubelet
identity="$JOIN_ENDPOINT $JOIN_CA_CERT_HASH "{node}
record() {{ install -d -m 0755 {MACHINE_STATE_DIR} && printf '%s\\n' "$identity" > {JOIN_RECORD} && rm -f {LEFT_RECORD}; }}
label_node() {{
  waited=0
  until kubectl --kubeconfig /etc/kubernetes/kubelet.conf label node {node} --overwrite {label_args}; do
    [ "$waited" -lt {NODE_REGISTER_WAIT_SECONDS} ] || {{ echo "could not label node {node}" >&2; exit 1; }}
    sleep 2; waited=$((waited + 2))
  done
}}
if [ -f /etc/kubernetes/kubelet.conf ] && grep -q "server: https://$JOIN_ENDPOINT\\$" /etc/kubernetes/kubelet.conf &&
  {{ [ ! -f {JOIN_RECORD} ] || [ "$(cat {JOIN_RECORD})" = "$identity" ]; }}; then
  echo "already joined to $JOIN_ENDPOINT"
  label_node
  record
  # The Node reports what the running kubelet is: a package upgrade replaces the binary only.
  kubelet_version() {{
    kubectl --kubeconfig /etc/kubernetes/kubelet.conf get node {node} -o jsonpath='{{.status.nodeInfo.kubeletVersion}}'
  }}
  running="$(kubelet_version)"
  if [ "$running" != "$target_version" ]; then
    echo "upgrading {node} from kubelet $running to $target_version" >&2
    kubeadm upgrade node
    systemctl daemon-reload
    systemctl restart kubelet
    waited=0
    until [ "$(kubelet_version)" = "$target_version" ]; do
      [ "$waited" -lt {NODE_UPGRADE_WAIT_SECONDS} ] || {{
        echo "{node} reports kubelet $(kubelet_version), not $target_version, {NODE_UPGRADE_WAIT_SECONDS} s after a restart" >&2
        exit 1
      }}
      sleep 2; waited=$((waited + 2))
    done
  fi
  exit 0
fi
if [ -n "${{BOOTSTRAP_TOKEN_EXPIRES:-}}" ] &&
  awk -v now="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -v end="$BOOTSTRAP_TOKEN_EXPIRES" 'BEGIN {{ exit !(now >= end) }}'; then
  echo "the bootstrap token expired at $BOOTSTRAP_TOKEN_EXPIRES and the tenant has deleted it;" >&2
  echo "make a new one with pulumi up --replace '<urn of {token_resource}>' (pulumi stack --show-urns lists it)" >&2
  exit 1
fi
waited=0
until systemctl is-active --quiet containerd; do
  [ "$waited" -lt {RUNTIME_WAIT_SECONDS} ] || {{ echo "containerd is not running after {RUNTIME_WAIT_SECONDS} s" >&2; exit 1; }}
  sleep 2; waited=$((waited + 2))
done
config="$(umask 077 && mktemp)"
trap 'rm -f "$config"' EXIT
cat > "$config" <<EOF
apiVersion: {api}
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$JOIN_ENDPOINT"
    token: "$JOIN_TOKEN"
    caCertHashes: ["$JOIN_CA_CERT_HASH"]
nodeRegistration:
  name: {node}
EOF
# The control plane this machine served last, as endpoint and CA: the join it is in or left, or
# (joined before joins were recorded) the endpoint its kubelet talks to.
served="$(cut -d' ' -f1,2 {JOIN_RECORD} 2>/dev/null || cut -d' ' -f1,2 {LEFT_RECORD} 2>/dev/null ||
  sed -n 's|^ *server: https://||p' /etc/kubernetes/kubelet.conf 2>/dev/null || true)"
attempt=1
while :; do
  for leftover in /etc/kubernetes/kubelet.conf /etc/kubernetes/bootstrap-kubelet.conf /etc/kubernetes/pki/ca.crt; do
    # `|| exit 1`: set -e spares a failure inside an && list.
    if [ -e "$leftover" ]; then {RESET_SCRIPT} || exit 1; break; fi
  done
  if [ -n "$served" ] && [ "$served" != "$JOIN_ENDPOINT $JOIN_CA_CERT_HASH" ] && [ "$served" != "$JOIN_ENDPOINT" ]; then
    echo "this machine served another control plane ($served): removing its images and pod logs" >&2
    {SCRUB_SCRIPT} || exit 1
  fi
  served=""
  if kubeadm join --config "$config"{ignore}; then
    record
    label_node
    exit 0
  fi
  [ "$attempt" -lt {JOIN_ATTEMPTS} ] || {{ echo "kubeadm join failed {JOIN_ATTEMPTS} times" >&2; exit 1; }}
  echo "kubeadm join attempt $attempt failed; retrying in {JOIN_RETRY_SECONDS} s" >&2
  attempt=$((attempt + 1))
  sleep {JOIN_RETRY_SECONDS}
done
"""
