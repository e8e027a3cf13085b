"""Reading ``gpu-tenancy:*`` from the Pulumi stack and failing cleanly on bad values."""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime.config import CONFIG, get_config_env, is_config_secret

from gpu_tenancy.config import CONFIG_NAMESPACE, ConfigError, StackConfig, config_value, misspelt_namespaces
from gpu_tenancy.stack_file import is_file, read_stack_file, stack_file


class StackConfigError(pulumi.RunError):
    """A configuration error; RunError makes Pulumi print the message without a traceback."""


def read_stack_config() -> StackConfig:
    """Every key of the ``gpu-tenancy`` namespace, validated; unknown keys are errors too."""
    prefix = f"{CONFIG_NAMESPACE}:"
    # The SDK offers no listing of config keys; both places it reads config from are consulted so
    # that a typo such as `gpu-tenancy:tenant` is reported instead of silently ignored.
    every_key = {*get_config_env(), *CONFIG.get()}
    misspelt = misspelt_namespaces(sorted(every_key))
    if misspelt:
        raise StackConfigError(str(ConfigError(misspelt)))
    keys = {key for key in every_key if key.startswith(prefix)}
    config = pulumi.Config(CONFIG_NAMESPACE)
    raw: dict[str, Any] = {}
    secret = [key[len(prefix) :] for key in keys if is_config_secret(key)]
    try:
        for key in sorted(keys):
            name = key[len(prefix) :]
            value = config.get(name)
            raw[name] = config_value(value, name) if value is not None else None
        stack_config = StackConfig.load(raw, secret_keys=secret)
    except ConfigError as error:
        raise StackConfigError(str(error)) from None
    for path in stack_config.plaintext_secrets(secret, _stack_file_values()):
        # State keeps it encrypted (the program wraps it as a secret); the stack file does not.
        pulumi.log.warn(
            f"{path} is in plain text in Pulumi.{pulumi.get_stack()}.yaml, and in its history if committed; set it "
            f"again as a secret: pulumi config set --secret --path '{CONFIG_NAMESPACE}:{path}' < FILE"
        )
    return stack_config


def _stack_file_values() -> dict[str, Any] | None:
    """This stack's ``Pulumi.<stack>.yaml`` as written (encrypted values as placeholders), by
    ``gpu-tenancy`` key: the config tells only which top-level keys hold a secret somewhere. A
    ``pulumi up --config-file`` elsewhere goes unread here: then only whole keys are judged."""
    path = stack_file(pulumi.get_stack())
    if not is_file(path):
        return None
    try:
        values, _ = read_stack_file(path, whole_secrets=True)
    except ConfigError:  # the CLI read it; a file this reader refuses only goes unchecked
        return None
    prefix = f"{CONFIG_NAMESPACE}:"
    return {key.removeprefix(prefix): value for key, value in values.items() if key.startswith(prefix)}


def fail(error: ConfigError) -> StackConfigError:
    """For checks that can only run once a live value (the kind subnet) is known."""
    return StackConfigError(str(error))
