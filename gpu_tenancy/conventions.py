"""Names the program writes so that policies, tools and people can find what belongs together.

Labels go on worker containers, token Secrets, namespaces and TenantControlPlanes; the environment
keys are set on every command that runs on a worker machine (docker exec or SSH), where the policy
pack reads which tenant a worker joins and at which endpoint.
"""

from __future__ import annotations

from typing import Final

TENANT_LABEL: Final = "gpu-tenancy.io/tenant"
ROLE_LABEL: Final = "gpu-tenancy.io/role"
WORKER_LABEL: Final = "gpu-tenancy.io/worker"
WORKER_ROLE: Final = "worker"

ENV_TENANT: Final = "GPU_TENANCY_TENANT"
ENV_NODE: Final = "GPU_TENANCY_NODE"
ENV_JOIN_ENDPOINT: Final = "JOIN_ENDPOINT"
ENV_JOIN_CA_CERT_HASH: Final = "JOIN_CA_CERT_HASH"
ENV_JOIN_TOKEN: Final = "JOIN_TOKEN"
ENV_TOKEN_EXPIRES: Final = "BOOTSTRAP_TOKEN_EXPIRES"
ENV_REGISTER: Final = "HAMI_NODE_REGISTER"
ENV_GPU_CAPACITY: Final = "NVIDIA_GPU_CAPACITY"
ENV_OWNER: Final = "GPU_TENANCY_OWNER"

# What the program keeps on a worker machine: which worker the machine is (an SSH host's owner),
# what it is joined as, its GPU registration. kubeadm reset leaves it alone.
MACHINE_STATE_DIR: Final = "/etc/gpu-tenancy"

# The DataStore the Kamaji chart creates and assigns to every TCP that names none
# (charts/kamaji values.yaml defaultDatastoreName, kamaji-etcd datastore.name).
KAMAJI_DEFAULT_DATA_STORE: Final = "default"
