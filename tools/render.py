"""Render a stack offline: run the real program under Pulumi's mock runtime and print JSON.

    python -m tools.render --stack dev
    python -m tools.render --config path/to/Pulumi.mystack.yaml [--show-secrets] [--preview]

Prints ``{"stack", "resources": [{"urn", "type", "name", "custom", "parent", "provider", "dependencies",
"inputs"}], "outputs"}``, with ``options`` on resources that set any and ``read`` on reads. Exit
status 2 on a configuration error, with the message on stderr; 141, quietly, when stdout closes early.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import cli

if TYPE_CHECKING:
    from .harness import Render


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", default=None, help="render Pulumi.<stack>.yaml of this project (default: dev)")
    source.add_argument("--config", type=Path, help="render any file in the Pulumi.<stack>.yaml format")


def render_from_arguments(args: argparse.Namespace, **kwargs: object) -> Render:
    """Render what --stack/--config name; exit 2 with a one-line reason when that is impossible."""
    # A short-lived process never needs the objects the SDKs allocate at import collected; the
    # collector walking them costs a tenth of a render, so it is off before they are imported.
    gc.disable()
    from gpu_tenancy.stack_file import missing_file  # noqa: PLC0415 - after gc.disable()

    from .harness import RenderError, render_file, stack_file  # noqa: PLC0415 - after gc.disable()

    path = args.config if args.config is not None else stack_file(args.stack or "dev")
    if problem := missing_file(path, "stack config file"):
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    try:
        return render_file(path, **kwargs)
    except RenderError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.render", description=__doc__.split("\n\n")[0])
    add_source_arguments(parser)
    parser.add_argument("--show-secrets", action="store_true", help="print secret values instead of [secret]")
    parser.add_argument("--preview", action="store_true", help="render as a preview of a fresh stack: live values unknown")
    args = parser.parse_args(argv)
    result = render_from_arguments(args, show_secrets=args.show_secrets, preview=args.preview)
    json.dump(result.to_json(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
