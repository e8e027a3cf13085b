"""The live validation suite behind ``python -m tools.validate``.

- ``outputs``: the deployed stack's outputs (Pulumi CLI or a JSON file) and its declared config;
- ``kube``: the only door to Kubernetes, a small ``Kube`` interface and its kubernetes-client
  implementation (every call bounded by a timeout);
- ``expect``: what the GPU checks expect, computed by ``gpu_tenancy.placement`` for the tenant's
  inventory and the GPU usage it already has;
- ``context``: one run's settings, tenants and clock, and the cleanup each check owns;
- ``checks``: the catalogue (what each check proves) and how each decides;
- ``runner``: connecting to the stack and running the checks in order, cleaning up however it ends;
- ``report``: results, the pass/fail table and the report files.
"""
