"""The gpu-tenancy isolation policy pack: `pulumi preview --policy-pack policies`.

This file only builds the pack; PolicyPack starts the analyzer's gRPC server and never returns,
so the policies live in the importable gpu_tenancy_policies package (tested directly, and run
offline by `python -m tools.policycheck`).
"""

import sys
from pathlib import Path

# The rules share the program's pure models (gpu_tenancy/: GPU catalogue, address pools, kubeadm
# constants), which live in the project root, one level up from the pack.
PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

from pulumi_policy import PolicyPack  # noqa: E402

from policies.gpu_tenancy_policies import PACK_ENFORCEMENT, PACK_NAME, POLICIES  # noqa: E402

PolicyPack(PACK_NAME, POLICIES, PACK_ENFORCEMENT)
