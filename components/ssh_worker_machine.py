"""A worker on a real Debian or Ubuntu host, prepared and driven over SSH (pulumi-command remote)."""

from __future__ import annotations

import shlex

import pulumi
import pulumi_command as command
import pulumi_random as random

from gpu_tenancy import addressing, conventions, kubeadm
from gpu_tenancy.config import SshTarget, kubernetes_minor
from gpu_tenancy.versions import KUBERNETES_PACKAGE_REPOSITORY

from .worker_machine import prelude, secret_prelude

# Every step checks before it changes anything, so a re-run converges without side effects.
# Which worker of which stack a host is (see owned): its first step, before anything else changes.
OWNER_FILE = f"{conventions.MACHINE_STATE_DIR}/owner"
# Present only where the unified (v2) hierarchy is mounted at /sys/fs/cgroup.
CGROUP_V2_FILE = "/sys/fs/cgroup/cgroup.controllers"
# The first minor whose kubelet refuses cgroup v1 by default (failCgroupV1, KEP-5573).
FIRST_MINOR_WITHOUT_CGROUP_V1 = 35

_PREPARE = (
    f"""set -eu
: "${{KUBERNETES_MINOR:?}}" "${{KUBERNETES_VERSION:?}}" "${{GPU_MODE:?}}" "${{{conventions.ENV_OWNER}:?}}"
# A host another stack or project prepared stays its: resetting and joining it here would leave
# that cluster's node NotReady. Another worker of this stack may take it over (a rename).
if [ -f {OWNER_FILE} ]; then
  case "$(cat {OWNER_FILE})" in
    "${{{conventions.ENV_OWNER}%/*/*}}"/*) ;;
    # The same UUID of the same state: the stack (or the project) was renamed.
    */"${{{conventions.ENV_OWNER}##*/}}") ;;
    *) echo "this host belongs to $(cat {OWNER_FILE}) (project/stack/worker/id): remove that worker from its" \\
         "stack first, or delete {OWNER_FILE} if that stack is gone" >&2
       exit 1 ;;
  esac
fi
# kubeadm's preflight refuses cgroup v1 for these kubelets too (SystemVerification), but only at
# the join, after the packages are installed; this says so before anything changes.
if [ "${{KUBERNETES_MINOR#v1.}}" -ge {FIRST_MINOR_WITHOUT_CGROUP_V1} ] && [ ! -f {CGROUP_V2_FILE} ]; then
  echo "this host runs cgroup v1, on which kubelet $KUBERNETES_MINOR does not start (failCgroupV1, KEP-5573):" \\
    "boot it with cgroup v2 (kernel argument systemd.unified_cgroup_hierarchy=1)" >&2
  exit 1
fi
install -d -m 0755 {conventions.MACHINE_STATE_DIR}
printf '%s\\n' "${conventions.ENV_OWNER}" > {OWNER_FILE}
"""
    + """export DEBIAN_FRONTEND=noninteractive
# A freshly booted host is often busy with unattended-upgrades: wait for its dpkg lock instead of failing.
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
# apt takes the package lists' and archives' locks without waiting (the timeout above covers only
# dpkg's frontend lock; apt-daily and cloud-init refresh the lists at boot), nor does dpkg itself:
# apt-get and dpkg runs are retried for as long, 10 s apart. Any other failure stops at once.
waiting_for_locks() {
  waited=0
  until out="$("$@" 2>&1)"; do
    status=$?
    case "$out" in
      *"Could not get lock"* | *"locked by another process"*) ;;
      *) printf '%s\n' "$out" >&2; return "$status" ;;
    esac
    [ "$waited" -lt 600 ] || { printf '%s\n' "$out" >&2; return "$status"; }
    echo "waiting for another apt or dpkg run to finish: $*" >&2
    sleep 10; waited=$((waited + 10))
  done
  printf '%s\n' "$out" >&2
}

# Kernel modules and sysctls kubelet and the pod network need, now and after a reboot.
printf 'overlay\\nbr_netfilter\\n' > /etc/modules-load.d/gpu-tenancy.conf
modprobe overlay
modprobe br_netfilter
printf '%s\\n' 'net.bridge.bridge-nf-call-iptables = 1' 'net.bridge.bridge-nf-call-ip6tables = 1' \\
  'net.ipv4.ip_forward = 1' > /etc/sysctl.d/99-gpu-tenancy.conf
sysctl --quiet --system

# kubelet refuses to run with swap on; off now and at boot. Swap that fstab does not list
# (systemd's GPT auto-discovery, zram) has units of its own, masked so that it stays off.
swapoff -a
sed -ri '/^[^#].*[[:space:]]swap[[:space:]]/s/^/# gpu-tenancy: /' /etc/fstab
systemctl list-units --type swap --all --plain --no-legend | awk '{ print $1 }' | while read -r unit; do
  # A unit file of the host's own in /etc cannot be masked over; it is disabled instead.
  systemctl mask "$unit" >/dev/null 2>&1 || systemctl disable "$unit" >/dev/null
done

# containerd, with the systemd cgroup driver the tenants' kubelets use. Docker CE's containerd.io
# Provides and Conflicts containerd and runc, so installing the distribution's containerd would
# make apt remove containerd.io and docker-ce with it: a host that has containerd.io keeps it.
# kubeadm's preflight needs iptables on PATH, which reaches a host only as a Recommends of kubelet.
set -- ca-certificates curl gpg conntrack iptables
case "$(dpkg-query -W -f='${Status}' containerd.io 2>/dev/null || true)" in
  *" ok installed") echo "containerd.io (Docker CE) is installed: kubelet uses its containerd" >&2 ;;
  *) set -- containerd "$@" ;;
esac
# A run cut short while dpkg unpacked or configured (a reboot, a lost session) leaves dpkg's journal,
# and apt then refuses every install ("dpkg was interrupted") until dpkg finishes that work.
if [ -n "$(ls -A /var/lib/dpkg/updates 2>/dev/null)" ]; then
  waiting_for_locks dpkg --force-confdef --force-confold --configure -a
fi
waiting_for_locks apt_get update -q
# --no-remove: a conflict with what the host already runs fails here instead of removing it.
waiting_for_locks apt_get install -y -q --no-install-recommends --no-remove "$@"
# containerd.io's own config.toml disables the CRI plugin kubelet talks to: it is replaced too.
if ! grep -q 'SystemdCgroup = true' /etc/containerd/config.toml 2>/dev/null ||
  grep -Eq '^[[:space:]]*disabled_plugins[[:space:]]*=.*cri' /etc/containerd/config.toml; then
  mkdir -p /etc/containerd
  containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' > /etc/containerd/config.toml
  # containerd 2.0 and 2.1 leave the option out of their default (containerd#12101): add it to
  # runc's options, whose table both config versions name ...runtimes.runc.options].
  grep -q 'SystemdCgroup = true' /etc/containerd/config.toml ||
    sed -i '/runtimes\\.runc\\.options\\]/a SystemdCgroup = true' /etc/containerd/config.toml
  grep -q 'SystemdCgroup = true' /etc/containerd/config.toml ||
    { echo "could not set SystemdCgroup in /etc/containerd/config.toml ($(containerd --version))" >&2; exit 1; }
  systemctl restart containerd
fi
systemctl enable --now containerd

if [ "$GPU_MODE" = nvidia ]; then
  # HAMi's device plugin needs the NVIDIA driver and containerd's default runtime to be NVIDIA's.
  missing() { echo "gpuMode nvidia: $1 not found; install $2 on this host" >&2; exit 1; }
  command -v nvidia-smi >/dev/null || missing nvidia-smi "the NVIDIA driver"
  nvidia-smi -L >/dev/null || { echo "gpuMode nvidia: nvidia-smi finds no GPU; check the NVIDIA driver" >&2; exit 1; }
  command -v nvidia-ctk >/dev/null || missing nvidia-ctk "the NVIDIA Container Toolkit"
  # Asked of the effective configuration: nvidia-ctk >= 1.18 writes a drop-in (conf.d/99-nvidia.toml)
  # that containerd reads only through config.toml's imports, which a config.toml replaced above
  # no longer has; nvidia-ctk then adds them back. containerd 1.7 quotes the value with ", 2.x with '.
  nvidia_default() { containerd config dump 2>/dev/null | grep -Eq "default_runtime_name = [\\"']nvidia[\\"']"; }
  if ! nvidia_default; then
    nvidia-ctk runtime configure --runtime=containerd --set-as-default
    systemctl restart containerd
    # nvidia-ctk 1.18.0 wrote its drop-in where containerd does not look (nvidia-container-toolkit#1404).
    nvidia_default || { echo "gpuMode nvidia: containerd's default runtime is still not nvidia after" \\
      "nvidia-ctk runtime configure ($(nvidia-ctk --version | head -n 1)); upgrade the NVIDIA Container Toolkit" >&2; exit 1; }
  fi
fi

# kubelet, kubeadm and kubectl from the official package repository of the tenant's minor, held
# at the tenant's patch release. A new version leaves a running kubelet as it is (its package does
# not restart it, nor does this step): the join restarts it after `kubeadm upgrade node`, once the
# control plane runs that version, since a kubelet must not be newer than its API server.
keyring=/etc/apt/keyrings/kubernetes-$KUBERNETES_MINOR.gpg
repository="$PACKAGE_REPOSITORY/$KUBERNETES_MINOR/deb/"
install -m 0755 -d /etc/apt/keyrings
# Without pipefail (dash has none) a failed download would still leave an empty keyring, and gpg
# would then ask on a terminal there is none of before overwriting it: download, then dearmor
# into place, so that a failed step leaves no keyring and the next run fetches it again.
if [ ! -s "$keyring" ]; then
  key="$(mktemp)"
  curl -fsSL "${repository}Release.key" -o "$key" || { rm -f "$key"; exit 1; }
  gpg --batch --yes --dearmor -o "$keyring.new" "$key" || { rm -f "$key" "$keyring.new"; exit 1; }
  rm -f "$key"
  mv "$keyring.new" "$keyring"
fi
echo "deb [signed-by=$keyring] $repository /" > /etc/apt/sources.list.d/kubernetes.list
waiting_for_locks apt_get update -q
package_version="$(apt-cache madison kubeadm | awk -v v="${KUBERNETES_VERSION#v}-" 'index($3, v) == 1 { print $3; exit }')"
[ -n "$package_version" ] || { echo "kubeadm $KUBERNETES_VERSION is not in $repository" >&2; exit 1; }
apt-mark unhold kubelet kubeadm kubectl >/dev/null 2>&1 || true
waiting_for_locks apt_get install -y -q --no-remove --allow-downgrades \\
  kubelet="$package_version" kubeadm="$package_version" kubectl="$package_version"
apt-mark hold kubelet kubeadm kubectl
systemctl enable kubelet
"""
)

# Leave the host as kubeadm's reset guide does, and remove what the preparation installed. Of
# iptables only kube-proxy's (KUBE- chains) and Calico's (cali- chains, and "cali:" comments on its
# rules in the built-in chains) go: flushing everything would drop the host's own firewall, and
# with a default-drop policy the SSH session itself.
_CLEAN_UP = (
    "kubeadm reset --force || true; "
    # The tenant's images and pod logs too (kubeadm.SCRUB_SCRIPT): the host may serve another tenant next.
    f"{kubeadm.SCRUB_SCRIPT} || true; "
    "rm -rf /etc/cni/net.d /var/lib/cni /etc/kubernetes /var/lib/kubelet; "
    "for table in iptables ip6tables; do "
    '"$table-save" | grep -v -e KUBE- -e "cali[-:]" | "$table-restore" || true; done; '
    "apt-mark unhold kubelet kubeadm kubectl || true; "
    "DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 purge -y -q --allow-change-held-packages "
    "kubelet kubeadm kubectl || true; "
    "rm -f /etc/apt/sources.list.d/kubernetes.list /etc/apt/keyrings/kubernetes-v*.gpg "
    "/etc/modules-load.d/gpu-tenancy.conf /etc/sysctl.d/99-gpu-tenancy.conf; "
    f"rm -rf {conventions.MACHINE_STATE_DIR}"
)


def owner(project: str, stack: str, worker: str, unique: str) -> str:
    """Readable, and unique to this worker of this stack's state: two checkouts may both deploy ``dev``."""
    return f"{project}/{stack}/{worker}/{unique}"


def owned(owner: str, delete: str) -> str:
    """``delete``, run only while the host is still ``owner``'s.

    Pulumi deletes what left the program at the end of an update, after it created what came in.
    A worker renamed on the same host, or a host handed to a new worker, has by then been prepared
    and joined anew under its new owner, and the old worker's deletes (kubeadm reset, the purge of
    kubelet) must not undo that. A host prepared before owners were written has none: it is
    cleaned up as before, unless it has no kubeadm either: a host reinstalled since has nothing of
    the worker's left, and ``kubeadm reset`` would fail its delete (only ``pulumi state delete``
    would get past that).

    Every remote command's ``delete`` is built here, and pulumi-command runs ``create`` again on
    any input change: editing this text re-runs each SSH host's preparation and join once on the
    next ``pulumi up`` (both converge without resetting anything, but every host must answer).
    """
    return (
        f'if [ -f {OWNER_FILE} ] && [ "$(cat {OWNER_FILE})" != {shlex.quote(owner)} ]; then '
        f'echo "this host is now $(cat {OWNER_FILE}), no longer {owner}: left as it is" >&2; exit 0; fi; '
        f"if [ ! -f {OWNER_FILE} ] && ! command -v kubeadm >/dev/null; then "
        f'echo "this host has no {OWNER_FILE} and no kubeadm (reinstalled?): nothing of {owner} to undo" >&2; exit 0; fi; '
        f"{delete}"
    )


def prepare_environment(kubernetes_version: str, gpu_mode: str, owner: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    major, minor = kubernetes_minor(kubernetes_version)
    return {
        "KUBERNETES_VERSION": kubernetes_version,
        "KUBERNETES_MINOR": f"v{major}.{minor}",
        "GPU_MODE": gpu_mode,
        "PACKAGE_REPOSITORY": KUBERNETES_PACKAGE_REPOSITORY,
        conventions.ENV_OWNER: owner,
    }


class SshWorkerMachine(pulumi.ComponentResource):
    """A host prepared for the tenant's Kubernetes version: modules, sysctls, swap, containerd, kubelet."""

    machine_id: pulumi.Output[str]
    hostname: str
    nested = False
    preflight_ignores: tuple[str, ...] = ()  # a real host passes every kubeadm preflight check

    def __init__(
        self,
        name: str,
        ssh: SshTarget,
        kubernetes_version: str,
        gpu_mode: str,
        after: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """``after``: what the preparation waits for, on creation and whenever it runs again."""
        super().__init__("gpu-tenancy:worker:SshWorkerMachine", name, None, opts)
        self.hostname = name
        # As the kind cluster's owner: a RandomUuid in this stack's state tells its hosts from
        # those of a stack of the same name elsewhere.
        unique = random.RandomUuid(f"{name}-owner", opts=pulumi.ResourceOptions(parent=self))
        project, stack = pulumi.get_project(), pulumi.get_stack()
        self._owner = unique.result.apply(lambda result: owner(project, stack, name, result))
        self._connection = command.remote.ConnectionArgs(
            host=ssh.host,
            port=ssh.port,
            user=ssh.user,
            private_key=pulumi.Output.secret(ssh.private_key),
            host_key=ssh.host_key,
        )
        self._host = ssh.host
        if ssh.host_key is None:
            # pulumi-command then checks no host key at all, on any connection, not only the first.
            target = addressing.join_host_port(ssh.host, ssh.port)
            pulumi.log.warn(
                f"worker {name}: no ssh.hostKey, so any machine answering at {target} is trusted with the "
                f"join token and root commands; pin it with a line of `ssh-keyscan -p {ssh.port} {ssh.host}`",
                resource=self,
            )
        prepare = self._command(
            f"{name}-prepare",
            script=_PREPARE,
            environment=prepare_environment(kubernetes_version, gpu_mode, self._owner),
            secrets={},
            delete=_CLEAN_UP,
            # A new version or GPU mode re-runs the preparation in place (its stdin changes).
            triggers=[ssh.host],
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        self.machine_id = prepare.id
        self.register_outputs({"machineId": self.machine_id})

    def run(
        self,
        name: str,
        script: pulumi.Input[str],
        environment: dict[str, pulumi.Input[str]],
        secrets: dict[str, pulumi.Input[str]],
        delete: str | None,
        triggers: list[pulumi.Input[str]] | None,
        opts: pulumi.ResourceOptions,
    ) -> command.remote.Command:
        # What the command runs with is recorded as its first trigger: the stack (and the policy
        # pack, which reads it) sees the tenant and endpoint a join uses, and a change re-runs it
        # from its delete, as joining another endpoint requires.
        return self._command(name, script, environment, secrets, delete, [environment, *(triggers or []), self.machine_id], opts)

    def _command(
        self,
        name: str,
        script: pulumi.Input[str],
        environment: dict[str, pulumi.Input[str]],
        secrets: dict[str, pulumi.Input[str]],
        delete: str | None,
        triggers: list[pulumi.Input[str]],
        opts: pulumi.ResourceOptions,
    ) -> command.remote.Command:
        """``sudo sh -s`` on the host, the script and its environment on stdin.

        Not through the Command's ``environment``: sshd accepts only the variables its AcceptEnv
        lists (``LANG LC_*`` on Debian and Ubuntu), and pulumi-command fails a command whose
        variable sshd refuses (provider/pkg/provider/remote/commandOutputs.go, since #395).
        """
        return command.remote.Command(
            name,
            connection=self._connection,
            create="sudo -n sh -s",
            delete=self._owner.apply(lambda mine: f"sudo -n sh -c {shlex.quote(owned(mine, delete))}") if delete else None,
            stdin=pulumi.Output.concat(prelude(environment), secret_prelude(secrets), script),
            triggers=triggers,
            logging=command.remote.Logging.STDERR,
            # The previous output would go as PULUMI_COMMAND_STDOUT/STDERR variables, which sshd
            # refuses (a warning per update or delete, pulumi-command#584); no script reads them.
            add_previous_output_in_env=False,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(delete_before_replace=True)),
        )
