#!/usr/bin/env bash
# Run a Pulumi CLI command with a backend and secrets provider the user did not have to choose.
#   scripts/pulumi-env.sh [--existing] STACK pulumi up ...
# --existing: the stack must exist already (read-only use such as validation); otherwise it is
# created on first use.
# A user who set PULUMI_BACKEND_URL or is logged in keeps that backend; otherwise state goes to
# .pulumi-state/ next to the project. A user who set PULUMI_CONFIG_PASSPHRASE(_FILE) keeps it;
# otherwise a random passphrase is generated once into .pulumi-passphrase (mode 600).
set -euo pipefail

existing=false
if [ "${1:-}" = --existing ]; then
  existing=true
  shift
fi
stack="${1:?stack}"
shift
project_dir="$(cd "$(dirname "$0")/.." && pwd)"

if [ -z "${PULUMI_BACKEND_URL:-}" ] && ! pulumi whoami >/dev/null 2>&1; then
  mkdir -p "$project_dir/.pulumi-state"
  export PULUMI_BACKEND_URL="file://$project_dir/.pulumi-state"
fi
secrets_provider=()
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  # Pulumi Cloud (https://) brings its own secrets provider; every self-managed backend needs one.
  case "${PULUMI_BACKEND_URL:-https://}" in https://*) ;; *)
    passphrase_file="$project_dir/.pulumi-passphrase"
    if [ ! -s "$passphrase_file" ]; then
      (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$passphrase_file")
    fi
    export PULUMI_CONFIG_PASSPHRASE_FILE="$passphrase_file"
    secrets_provider=(--secrets-provider passphrase)
  ;; esac
fi
export PULUMI_SKIP_UPDATE_CHECK=true

if ! pulumi stack select "$stack" >/dev/null 2>&1; then
  if [ "$existing" = true ]; then
    echo "no stack '$stack' in this backend (${PULUMI_BACKEND_URL:-pulumi cloud}): run \`make up\` first" >&2
    exit 2
  fi
  pulumi stack init "$stack" "${secrets_provider[@]}"
fi
exec "$@"
