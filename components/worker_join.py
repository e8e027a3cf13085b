"""Bootstrap: joining a worker machine to its tenant with a declarative token, no kubeadm on the host."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
import pulumiverse_time as time

from gpu_tenancy import conventions, kubeadm

from .worker_machine import WorkerMachine

# A token outlives its join only long enough to retry one; the kubelet has certificates after.
TOKEN_TTL_HOURS = 24
BOOTSTRAP_READER = "gpu-tenancy:bootstrap-config-reader"


# Leaving undoes the join on the machine. The Node object stays in the tenant, NotReady: a kubelet
# may not delete its Node (the Node authorizer never allows it, and Kubernetes withdrew node
# self-deletion on purpose: a node that deletes and re-registers itself sheds the taints an admin
# set, kubernetes/kubernetes#71021, CVE-2025-5187), and the machine must not hold the tenant's admin
# credentials. (The script: kubeadm.LEAVE_SCRIPT.)


class JoinPermissions(pulumi.ComponentResource):
    """What joining needs from the tenant beyond what Kamaji prepares.

    kubeadm 1.36 reads ``kube-system/kubeadm-config`` and ``kubelet-config`` with the bootstrap
    token; a public Kamaji 26.8 + v1.36.4 lab found no RBAC granting it (see README, joins). One
    Role with ``get`` on exactly those two names, bound to kubeadm's node-token group and to the
    nodes' group: ``kubeadm upgrade node`` reads the same two with the node's own credentials
    (``kubelet.conf``) when a joined host moves to a new version. Upstream kubeadm grants both
    groups the same (its ``kubeadm:nodes-kubeadm-config`` and ``kubeadm:kubelet-config``).
    """

    def __init__(self, name: str, provider: k8s.Provider, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpu-tenancy:worker:JoinPermissions",
            name,
            None,
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(providers=[provider])),
        )
        metadata = {"name": BOOTSTRAP_READER, "namespace": "kube-system"}
        role = k8s.rbac.v1.Role(
            f"{name}-bootstrap-config-reader",
            metadata=metadata,
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=[""], resources=["configmaps"], resource_names=["kubeadm-config", "kubelet-config"], verbs=["get"]
                )
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.binding = k8s.rbac.v1.RoleBinding(
            f"{name}-bootstrap-config-reader",
            metadata=metadata,
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=role.metadata["name"]),
            subjects=[
                k8s.rbac.v1.SubjectArgs(api_group="rbac.authorization.k8s.io", kind="Group", name=group)
                for group in (kubeadm.NODE_BOOTSTRAP_GROUP, kubeadm.NODES_GROUP)
            ],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({})


class WorkerJoin(pulumi.ComponentResource):
    """A bootstrap token Secret in the tenant, then ``kubeadm join`` run on the machine.

    The token lives in state (pulumi-random) and changes only with the machine, the endpoint or
    the tenant's CA, so the join re-runs only when one of them changes.
    """

    join: pulumi.Resource

    def __init__(
        self,
        name: str,
        tenant: str,
        kubernetes_version: str,
        machine: WorkerMachine,
        endpoint: pulumi.Input[str],
        ca_cert_hash: pulumi.Input[str],
        provider: k8s.Provider,
        permissions: JoinPermissions,
        node_labels: dict[str, str | None],
        cluster: pulumi.Resource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:worker:WorkerJoin", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # A token outlives its use by at most TOKEN_TTL_HOURS, after which Kamaji's tokencleaner
        # deletes it; any re-join therefore gets a fresh one. The join re-runs for a new machine, a
        # new endpoint, or a new CA at the same endpoint (a control plane made anew behind a pinned
        # VIP, whose token Secret is then created again with the old, long-past expiry).
        keepers = {"machine": machine.machine_id, "endpoint": endpoint, "ca": ca_cert_hash}
        token_id = random.RandomString(f"{name}-token-id", length=6, special=False, upper=False, keepers=keepers, opts=child)
        token_secret = random.RandomString(
            f"{name}-token-secret",
            length=16,
            special=False,
            upper=False,
            keepers=keepers,
            opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["result"]),
        )
        # A new token id (the machine, the endpoint, the CA, or `--replace` of the id when a join
        # comes too late for the old token) gets a new expiry too.
        expiry = time.Offset(
            f"{name}-token-expiry", offset_hours=TOKEN_TTL_HOURS, triggers={**keepers, "token": token_id.result}, opts=child
        )
        secret_value = pulumi.Output.secret(token_secret.result)
        token = pulumi.Output.secret(pulumi.Output.concat(token_id.result, ".", secret_value))
        token_secret_resource = k8s.core.v1.Secret(
            f"{name}-bootstrap-token",
            metadata={
                "name": token_id.result.apply(kubeadm.bootstrap_secret_name),
                "namespace": "kube-system",
                "labels": {conventions.TENANT_LABEL: tenant, conventions.WORKER_LABEL: machine.hostname},
            },
            type=kubeadm.BOOTSTRAP_SECRET_TYPE,
            string_data=pulumi.Output.secret(
                pulumi.Output.all(token_id.result, secret_value, expiry.rfc3339).apply(
                    lambda args: kubeadm.bootstrap_token_secret(
                        args[0], args[1], args[2], f"gpu-tenancy join of {machine.hostname} to {tenant}"
                    )
                )
            ),
            # The token lives in the tenant cluster and goes with it (``cluster``, its TCP).
            opts=pulumi.ResourceOptions(parent=self, provider=provider, deleted_with=cluster),
        )
        self.join = machine.run(
            f"{name}-join",
            script=kubeadm.join_script(
                machine.hostname, kubernetes_version, machine.preflight_ignores, node_labels, f"{name}-token-id"
            ),
            environment={
                conventions.ENV_TENANT: tenant,
                conventions.ENV_JOIN_ENDPOINT: endpoint,
                conventions.ENV_JOIN_CA_CERT_HASH: ca_cert_hash,
                conventions.ENV_TOKEN_EXPIRES: expiry.rfc3339,
            },
            secrets={conventions.ENV_JOIN_TOKEN: token},
            delete=kubeadm.LEAVE_SCRIPT,
            triggers=[token, endpoint],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[token_secret_resource, permissions.binding]),
        )
        self.register_outputs({})
