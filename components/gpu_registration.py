"""Registering a worker's simulated cards with HAMi, and keeping them registered.

HAMi's mock device plugin invents nothing: it advertises what the node's
``hami.io/node-nvidia-register`` annotation lists, and only while the node's status capacity has a
non-zero ``nvidia.com/gpu`` (Project-HAMi/mock-device-plugin:internal/pkg/api/device/nvidia/device.go).
Both are written by a systemd timer on the node itself, with the node's own credentials
(NodeRestriction lets a kubelet change only its own Node), so no kubectl runs on the host and a
node that re-registers (its Node deleted, or kubelet zeroing extended resources after losing its
device-plugin checkpoint) is registered again within half a minute.
"""

from __future__ import annotations

import shlex

import pulumi

from gpu_tenancy import conventions, gpus

from .worker_machine import WorkerMachine

REFRESH_SECONDS = 30

_REGISTER_FILE = f"{conventions.MACHINE_STATE_DIR}/{gpus.REGISTER_ANNOTATION.split('/')[1]}.json"
_CAPACITY_PATH = "/status/capacity/" + gpus.GPU_COUNT_RESOURCE.replace("/", "~1")

_REGISTER = f"""set -eu
: "${{GPU_TENANCY_NODE:?}}" "${{HAMI_NODE_REGISTER:?}}" "${{NVIDIA_GPU_CAPACITY:?}}"
install -d -m 0755 {conventions.MACHINE_STATE_DIR}
printf '%s' "$HAMI_NODE_REGISTER" > {_REGISTER_FILE}
cat > /usr/local/bin/gpu-tenancy-register <<EOF
#!/bin/sh
# Written by gpu-tenancy: re-applies this node's simulated GPU registration for HAMi.
set -eu
k() {{ kubectl --kubeconfig /etc/kubernetes/kubelet.conf "\\$@"; }}
k annotate node "$GPU_TENANCY_NODE" --overwrite "{gpus.REGISTER_ANNOTATION}=\\$(cat {_REGISTER_FILE})"
k patch node "$GPU_TENANCY_NODE" --subresource=status --type=json \\
  -p '[{{"op":"add","path":"{_CAPACITY_PATH}","value":"$NVIDIA_GPU_CAPACITY"}}]'
EOF
chmod 0755 /usr/local/bin/gpu-tenancy-register
cat > /etc/systemd/system/gpu-tenancy-register.service <<EOF
[Unit]
Description=Register this node's simulated GPUs with HAMi
After=kubelet.service
[Service]
Type=oneshot
ExecStart=/usr/local/bin/gpu-tenancy-register
EOF
cat > /etc/systemd/system/gpu-tenancy-register.timer <<EOF
[Unit]
Description=Keep this node's simulated GPUs registered with HAMi
[Timer]
OnBootSec={REFRESH_SECONDS}s
OnUnitActiveSec={REFRESH_SECONDS}s
[Install]
WantedBy=timers.target
EOF
systemctl daemon-reload
systemctl enable --now gpu-tenancy-register.timer
# Register now, so that `pulumi up` ends with the cards in place; the kubelet may still be
# finishing its first registration.
for _ in $(seq 1 30); do
  /usr/local/bin/gpu-tenancy-register && exit 0
  sleep 2
done
echo "could not register the GPUs of $GPU_TENANCY_NODE" >&2
exit 1
"""


def unregister_script(node: str) -> str:
    # The capacity goes too: the mock plugin keeps advertising while it is non-zero, and the
    # default scheduler would place a pod that skipped HAMi's webhook on a node with no cards.
    kubectl = "kubectl --kubeconfig /etc/kubernetes/kubelet.conf"
    remove_capacity = shlex.quote(f'[{{"op":"remove","path":"{_CAPACITY_PATH}"}}]')
    # Stopping the timer does not stop a run it has just started, which would register the cards
    # again after the removals below: the service is stopped too.
    return (
        "systemctl disable --now gpu-tenancy-register.timer || true; "
        "systemctl stop gpu-tenancy-register.service || true; "
        "rm -f /etc/systemd/system/gpu-tenancy-register.* /usr/local/bin/gpu-tenancy-register; "
        f"{kubectl} annotate node {shlex.quote(node)} {gpus.REGISTER_ANNOTATION}- || true; "
        f"{kubectl} patch node {shlex.quote(node)} --subresource=status --type=json -p {remove_capacity} || true"
    )


class GpuRegistration(pulumi.ComponentResource):
    """The cards of one worker, registered on its node the way HAMi's device plugin would."""

    command: pulumi.Resource

    def __init__(
        self,
        name: str,
        tenant: str,
        machine: WorkerMachine,
        cards: list[gpus.Card],
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:gpu:GpuRegistration", name, None, opts)
        self.command = machine.run(
            f"{name}-gpu-registration",
            script=_REGISTER,
            environment={
                conventions.ENV_TENANT: tenant,
                conventions.ENV_NODE: machine.hostname,
                conventions.ENV_REGISTER: gpus.register_annotation(cards),
                conventions.ENV_GPU_CAPACITY: str(gpus.gpu_capacity(cards)),
            },
            secrets={},
            delete=unregister_script(machine.hostname),
            triggers=None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )
        self.register_outputs({})
