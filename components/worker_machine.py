"""What a worker machine offers the steps that run on it (CAPD's split: machine vs bootstrap).

The join and the GPU registration need only a root shell on the machine; docker workers
(``docker_worker_machine``) and real hosts over SSH (``ssh_worker_machine``) provide it.
"""

from __future__ import annotations

import shlex
from typing import Protocol

import pulumi


class WorkerMachine(Protocol):
    hostname: str
    machine_id: pulumi.Output[str]  # changes when the machine is replaced
    nested: bool  # a container running kubelet (kind's kubelet settings apply)
    preflight_ignores: tuple[str, ...]

    def run(
        self,
        name: str,
        script: pulumi.Input[str],
        environment: dict[str, pulumi.Input[str]],
        secrets: dict[str, pulumi.Input[str]],
        delete: str | None,
        triggers: list[pulumi.Input[str]] | None,
        opts: pulumi.ResourceOptions,
    ) -> pulumi.CustomResource:
        """A command running ``script`` as root on create and on input changes.

        ``environment`` must reach the script and stays readable in the stack (policies check
        it); ``secrets`` reach it on its stdin only. ``delete`` runs when the command goes.
        """
        ...


def prelude(values: dict[str, pulumi.Input[str]]) -> pulumi.Output[str]:
    """Shell assignments that hand values to a script on its stdin, never on a command line."""
    if not values:
        return pulumi.Output.from_input("")
    return pulumi.Output.all(**values).apply(
        lambda resolved: "".join(f"{key}={shlex.quote(value)}\n" for key, value in resolved.items())
    )


def secret_prelude(secrets: dict[str, pulumi.Input[str]]) -> pulumi.Output[str]:
    return pulumi.Output.secret(prelude(secrets)) if secrets else pulumi.Output.from_input("")
