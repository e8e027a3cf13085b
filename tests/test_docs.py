"""The configuration documented in Pulumi.yaml and the README is the one the code validates."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gpu_tenancy import gpus
from gpu_tenancy.config import StackConfig

PROJECT_DIR = Path(__file__).resolve().parent.parent
REQUIRED, UNSET = "required", "none"


def nested_model(annotation: Any) -> type[BaseModel] | None:
    """The config model inside ``Model``, ``Model | None`` or ``list[Model]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = nested_model(argument)
        if found is not None:
            return found
    return None


def fields(model: type[BaseModel]) -> Iterator[tuple[str, Any, type[BaseModel] | None, bool]]:
    """(config key, default, nested model, is a list) of each field."""
    for name, field in model.model_fields.items():
        is_list = typing.get_origin(field.annotation) is list
        yield field.alias or name, field, nested_model(field.annotation), is_list


def documented_config() -> dict[str, Any]:
    """The commented-out configuration block of Pulumi.yaml, parsed."""
    lines = (PROJECT_DIR / "Pulumi.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   gpu-tenancy:"))
    block = [line.removeprefix("#") for line in lines[start:] if line.startswith("#")]
    parsed = yaml.safe_load("\n".join(block))
    return {key.removeprefix("gpu-tenancy:"): value for key, value in parsed.items()}


def compare(model: type[BaseModel], documented: dict[str, Any], path: str) -> list[str]:
    problems = []
    keys = [key for key, *_ in fields(model)]
    if sorted(documented) != sorted(keys):
        problems.append(f"{path or 'gpu-tenancy'}: documents {sorted(documented)}, the model has {sorted(keys)}")
    for key, field, inner, is_list in fields(model):
        if key not in documented:
            continue
        value, where = documented[key], f"{path}.{key}".lstrip(".")
        if field.is_required():
            expected: Any = REQUIRED
        elif inner is not None and (is_list or field.default is not None):
            item = value[0] if is_list and isinstance(value, list) and value else value
            if not isinstance(item, dict):
                problems.append(f"{where}: documented as {value!r}, not as its keys")
            else:
                problems.extend(compare(inner, item, where + ("[]" if is_list else "")))
            continue
        else:
            expected = UNSET if field.default is None else str(field.default)
        if str(value) != expected:
            problems.append(f"{where}: documented {value!r}, the code's default is {expected!r}")
    return problems


def test_pulumi_yaml_documents_every_key_with_the_codes_default() -> None:
    assert compare(StackConfig, documented_config(), "") == []


def test_the_comparison_catches_a_stale_default() -> None:
    documented = documented_config()
    documented["versions"]["hami"] = "2.9.0"
    del documented["network"]["workerNetwork"]
    problems = compare(StackConfig, documented, "")
    assert any("versions.hami: documented '2.9.0'" in problem for problem in problems)
    assert any(problem.startswith("network: documents ['announceFromControlPlanes', 'pool']") for problem in problems)


def config_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for key, _, inner, is_list in fields(model):
        path = f"{prefix}{key}"
        yield path
        if inner is not None:
            yield from config_paths(inner, f"{path}{'[]' if is_list else ''}.")


def readme_rows() -> dict[str, str]:
    """The README's configuration table: key -> the rest of its row."""
    readme = (PROJECT_DIR / "README.md").read_text()
    section = readme.split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    return {match[1]: match[2] for match in re.finditer(r"^\| `([^`]+)` \|(.*)$", section, re.MULTILINE)}


def test_the_readme_describes_every_config_key() -> None:
    rows = readme_rows()
    missing = []
    for path in config_paths(StackConfig):
        if path in rows or any(row.startswith((f"{path}.", f"{path}[].")) for row in rows):
            continue
        # A key inside an object described on one row (quota, gpus, ssh) is named in that row.
        parent, _, leaf = path.rpartition(".")
        parents = [row for row in rows if parent.startswith(row)]
        # Named in the row's code spans (`{host, user, ...}`), not merely a word of its prose.
        if not any(re.search(rf"\b{leaf}\b", " ".join(re.findall(r"`([^`]*)`", rows[row]))) for row in parents):
            missing.append(path)
    assert missing == []
    assert set(rows) <= set(config_paths(StackConfig)), "a README row names no config key"


def test_the_readme_lists_every_policy_at_its_level() -> None:
    from policies.gpu_tenancy_policies import POLICIES  # noqa: PLC0415 - the pack's imports stay out of the config tests
    from policies.gpu_tenancy_policies.pack import default_level  # noqa: PLC0415

    readme = (PROJECT_DIR / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (mandatory|advisory) \|", readme, flags=re.MULTILINE))
    assert rows == {policy.name: default_level(policy).value for policy in POLICIES}


def test_the_readmes_gpu_catalogue_is_the_one_cards_are_registered_from() -> None:
    # The memory is what quotas and the placement model count against, and what HAMi is told a card has.
    readme = (PROJECT_DIR / "README.md").read_text()
    table = readme.split("| model | NVML name | memory (MiB) |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]
    documented = {model: (name.split(" (type ")[0], int(memory)) for model, name, memory in rows}
    assert documented == {model: (gpu.nvml_name, gpu.memory_mib) for model, gpu in gpus.CATALOGUE.items()}
