"""Pure logic of gpu-tenancy: configuration, addressing, GPU inventory, kubeadm material.

Nothing in this package imports Pulumi, so the program, the policy pack, the tools and the
tests share one implementation.
"""
