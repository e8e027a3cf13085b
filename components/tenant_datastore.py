"""A tenant's own etcd: a kamaji-etcd release whose chart also creates the Kamaji DataStore."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from .helm import chart


class DedicatedDataStore(pulumi.ComponentResource):
    """Three etcd members in the tenant's namespace of the management cluster.

    Kamaji's default DataStore is one etcd for every tenant (isolated by etcd RBAC and key prefix,
    sharing quota, compaction and I/O); a dedicated one gives the tenant physically separate data,
    as Kamaji recommends (clastix/kamaji:docs/content/concepts/datastore.md).
    """

    name: str
    release: k8s.helm.v3.Release

    def __init__(
        self,
        name: str,
        tenant: str,
        namespace: pulumi.Input[str],
        version: str,
        depends_on: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("gpu-tenancy:tenant:DedicatedDataStore", name, None, opts)
        self.name = f"{tenant}-etcd"
        self.release = chart(
            f"{name}-etcd",
            self.name,
            "kamajiEtcd",
            version,
            namespace,
            # The DataStore is cluster-scoped; the chart names it and its Secrets after the release.
            {"fullnameOverride": self.name, "datastore": {"enabled": True, "name": self.name}},
            # Children do not inherit a component's depends_on: the release itself waits. It names
            # the component's deleted_with (the kind cluster) itself too.
            pulumi.ResourceOptions(parent=self, depends_on=depends_on, deleted_with=opts.deleted_with if opts else None),
            chart_name="kamaji-etcd",
        )
        self.register_outputs({"dataStore": self.name})
