#!/usr/bin/env bash
# Run a Pulumi CLI command with a backend and secrets provider the user did not have to choose.
#   scripts/pulumi-env.sh [--existing] STACK pulumi up ...
# --existing: the stack must exist already (read-only use such as validation); otherwise it is
# created on first use.
# A user who set PULUMI_BACKEND_URL or is logged in keeps that backend; otherwise state goes to
# .pulumi-state/ next to the project. A user who set PULUMI_CONFIG_PASSPHRASE(_FILE) keeps it;
# otherwise every self-managed backend (file, s3, gs, azblob) gets a passphrase generated once into
# .pulumi-passphrase (mode 600). Pulumi Cloud brings its own secrets provider.
# Written for bash 3.2 too (macOS): no empty-array expansion under `set -u`.
set -euo pipefail

existing=false
if [ "${1:-}" = --existing ]; then
  existing=true
  shift
fi
stack="${1:?stack}"
shift
project_dir="$(cd "$(dirname "$0")/.." && pwd)"

backend="${PULUMI_BACKEND_URL:-}"
if [ -z "$backend" ]; then
  if whoami="$(pulumi whoami --json 2>/dev/null)"; then
    # Logged in: `pulumi login` chose the backend; its URL says whether it is Pulumi Cloud.
    backend="$(printf '%s\n' "$whoami" | sed -n 's/^ *"url": *"\([^"]*\)".*/\1/p')"
  elif [ -n "${PULUMI_ACCESS_TOKEN:-}" ] ||
    grep -qs '"current": *"[^"]' "${PULUMI_HOME:-$HOME/.pulumi}/credentials.json"; then
    # A login exists but does not answer (network, expired token): a fresh local stack would
    # deploy a second copy of everything, so stop instead.
    echo "pulumi whoami failed although a login is configured (PULUMI_ACCESS_TOKEN or pulumi login):" \
      "check it with \`pulumi whoami\`, or set PULUMI_BACKEND_URL" >&2
    exit 2
  else
    mkdir -p "$project_dir/.pulumi-state"
    backend="file://$project_dir/.pulumi-state"
    export PULUMI_BACKEND_URL="$backend"
  fi
fi

passphrase_provider=""
fresh_passphrase=false
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  # An empty URL (a CLI that did not say) is left to the user's own setup, as Pulumi Cloud is.
  case "$backend" in "" | https://* | http://*) ;; *)
    passphrase_file="$project_dir/.pulumi-passphrase"
    if [ ! -s "$passphrase_file" ]; then
      (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$passphrase_file")
      fresh_passphrase=true
    fi
    export PULUMI_CONFIG_PASSPHRASE_FILE="$passphrase_file"
    passphrase_provider=passphrase
  ;; esac
fi
export PULUMI_SKIP_UPDATE_CHECK=true

if ! pulumi stack select "$stack" >/dev/null 2>&1; then
  if [ "$existing" = true ]; then
    echo "no stack '$stack' in this backend (${backend:-pulumi cloud}): run \`make up\` first" >&2
    exit 2
  fi
  stack_file="$project_dir/Pulumi.$stack.yaml"
  if [ "$fresh_passphrase" = true ] && [ -f "$stack_file" ] && grep -q '^encryptionsalt:' "$stack_file"; then
    # The salt was made with another passphrase, for a stack in another backend (a committed line,
    # or state that was reset); `stack init` would check the new passphrase against it and fail.
    echo "Pulumi.$stack.yaml: dropping an encryptionsalt made for another passphrase" >&2
    sed '/^encryptionsalt:/d' "$stack_file" > "$stack_file.tmp" && mv "$stack_file.tmp" "$stack_file"
  fi
  if [ -n "$passphrase_provider" ]; then
    pulumi stack init "$stack" --secrets-provider "$passphrase_provider"
  else
    pulumi stack init "$stack"
  fi
fi
exec "$@"
