"""gpu-tenancy: Kamaji tenant control planes with HAMi GPU slicing, declared in one program."""

import pulumi

from components.platform import Platform
from components.stack_config import read_stack_config

config = read_stack_config()
platform = Platform("gpu-tenancy", config)

pulumi.export("managementKubeconfig", platform.management_kubeconfig)
pulumi.export("tenants", platform.tenant_outputs())
