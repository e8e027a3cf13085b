#!/usr/bin/env bash
# Run a Pulumi CLI command with a backend and secrets provider the user did not have to choose.
#   scripts/pulumi-env.sh [--existing] STACK pulumi up ...
# (no STACK or no command, or -h/--help: the usage on stderr, exit 2, nothing created).
# --existing: the stack must exist already (validation, outputs, destroy) and nothing is created:
# no .pulumi-state/, no .pulumi-passphrase, no stack. Otherwise the stack is created on first use.
# A user who set PULUMI_BACKEND_URL keeps that backend; a stack already in .pulumi-state/ next to
# the project stays there; a user who is logged in keeps that backend; otherwise state goes to
# .pulumi-state/. A user who set PULUMI_CONFIG_PASSPHRASE(_FILE) keeps it;
# otherwise every self-managed backend (file, s3, gs, azblob) gets a passphrase generated once into
# .pulumi-passphrase (mode 600). Pulumi Cloud brings its own secrets provider. As in Pulumi's own
# readPassphrase, a PULUMI_CONFIG_PASSPHRASE that is set counts even when empty (an empty passphrase),
# while an empty PULUMI_CONFIG_PASSPHRASE_FILE is ignored.
# Written for bash 3.2 too (macOS): no empty-array expansion under `set -u`.
set -euo pipefail

usage() {
  echo "usage: scripts/pulumi-env.sh [--existing] <stack> <command> [args...]" >&2
  echo "  runs <command>, e.g. pulumi up --stack <stack>, with this project's Pulumi backend and passphrase;" >&2
  echo "  creates <stack> first unless it exists; with --existing it must exist and nothing is created" >&2
  exit 2
}

# Before anything is created: no stack, no command, or an option where the stack belongs is a usage error.
existing=false
if [ "${1:-}" = --existing ]; then
  existing=true
  shift
fi
case "${1:-}" in "" | -*) usage ;; esac
case "${2:-}" in "" | -*) usage ;; esac
stack="$1"
shift
project_dir="$(cd "$(dirname "$0")/.." && pwd)"

if ! command -v pulumi >/dev/null 2>&1; then
  if [ -x "$project_dir/.tools/bin/pulumi" ]; then
    echo "the Pulumi CLI is not on PATH: run this through make (\`make up\`, \`make destroy\`, ...," \
      "which put .tools/bin on PATH), or prefix PATH=\"$project_dir/.tools/bin:\$PATH\"" >&2
  else
    # Through make too (make kubeconfig fetches nothing): nothing in .tools/bin yet.
    echo "the Pulumi CLI is not on PATH and not fetched yet: \`make tools\` fetches it into .tools/bin," \
      "or install it (https://www.pulumi.com/docs/install/)" >&2
  fi
  exit 2
fi

backend="${PULUMI_BACKEND_URL:-}"
# The stack file itself (gzipped when PULUMI_SELF_MANAGED_STATE_GZIP is set), not the .bak that
# `pulumi stack rm` leaves behind.
if [ -z "$backend" ] && [ -n "$(find "$project_dir/.pulumi-state/.pulumi/stacks" \( -name "${stack##*/}.json" -o -name "${stack##*/}.json.gz" \) 2>/dev/null)" ]; then
  # This checkout's stack lives in .pulumi-state/: a `pulumi login` made since (logins are
  # machine-wide, perhaps for another project) must not move it to a backend without it.
  backend="file://$project_dir/.pulumi-state"
  export PULUMI_BACKEND_URL="$backend"
fi
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
    if [ "$existing" = true ] && [ ! -d "$project_dir/.pulumi-state" ]; then
      echo "no stack '$stack' in this backend: no login, no PULUMI_BACKEND_URL and no local state" \
        "($project_dir/.pulumi-state): run \`make up\` first" >&2
      exit 2
    fi
    mkdir -p "$project_dir/.pulumi-state"
    backend="file://$project_dir/.pulumi-state"
    export PULUMI_BACKEND_URL="$backend"
  fi
fi

passphrase_provider=""
own_passphrase=false   # the passphrase is this project's .pulumi-passphrase, not one the user chose
fresh_passphrase=false # ... and was generated just now
no_passphrase=false    # a self-managed backend and no passphrase from anywhere (yet)
passphrase_file="$project_dir/.pulumi-passphrase"
use_own_passphrase() {
  own_passphrase=true
  export PULUMI_CONFIG_PASSPHRASE_FILE="$passphrase_file"
  passphrase_provider=passphrase
}
if [ -z "${PULUMI_CONFIG_PASSPHRASE+set}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  # An empty URL (a CLI that did not say) is left to the user's own setup, as Pulumi Cloud is.
  case "$backend" in "" | https://* | http://*) ;; *)
    if [ -s "$passphrase_file" ]; then
      use_own_passphrase
    else
      # Generated only for a stack about to be created (below): a stack that exists (another
      # checkout's, on a machine-wide --local login or a shared bucket) was made with another.
      no_passphrase=true
    fi
  ;; esac
fi
export PULUMI_SKIP_UPDATE_CHECK=true

if select_error="$(pulumi stack select "$stack" 2>&1 >/dev/null)"; then
  if [ "$no_passphrase" = true ]; then
    echo "note: no PULUMI_CONFIG_PASSPHRASE(_FILE) and no $project_dir/.pulumi-passphrase: set the" \
      "passphrase stack '$stack' was created with if pulumi asks for one" >&2
  fi
else
  if [ "$existing" = true ]; then
    # pulumi's own words lead unless it said the stack is missing (a network, login or state
    # error is not a missing stack).
    case "$select_error" in
      *"no stack named"*) echo "no stack '$stack' in this backend (${backend:-pulumi cloud}): run \`make up\` first" >&2 ;;
      *) echo "\`pulumi stack select $stack\` failed in this backend (${backend:-pulumi cloud}):" >&2 ;;
    esac
    sed -n '1,5s/^/  /p' <<< "${select_error:-(pulumi printed nothing)}" >&2
    exit 2
  fi
  if [ "$no_passphrase" = true ]; then
    # An empty file (an interrupted first run, a `touch`) is no passphrase: replace it, and its mode
    # with it (a redirect into an existing file keeps that file's mode).
    rm -f "$passphrase_file"
    (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$passphrase_file")
    use_own_passphrase
    fresh_passphrase=true
  fi
  # Pulumi names a stack's file after the last part of a qualified name (org/project/stack).
  stack_file="$project_dir/Pulumi.${stack##*/}.yaml"
  if [ "$own_passphrase" = true ] && [ -f "$stack_file" ] && grep -q '^encryptionsalt:' "$stack_file"; then
    # `stack init` checks the passphrase against a salt already in the file and fails with
    # "incorrect passphrase" when another passphrase made it (someone's committed line). A stack
    # about to be created has nothing encrypted with the salt except `secure:` config values, so
    # with our own passphrase and no stack the salt goes: always for a passphrase generated just
    # now, otherwise when pulumi said there is no such stack and no secure value needs the salt.
    # A passphrase the user chose may be the one that made it: their salt stays.
    stack_missing=false
    case "$select_error" in *"no stack named"*) stack_missing=true ;; esac
    if [ "$fresh_passphrase" = true ] ||
      { [ "$stack_missing" = true ] && ! grep -q 'secure:' "$stack_file"; }; then
      echo "Pulumi.${stack##*/}.yaml: dropping an encryptionsalt left from another stack or passphrase" >&2
      sed '/^encryptionsalt:/d' "$stack_file" > "$stack_file.tmp" && mv "$stack_file.tmp" "$stack_file"
    elif [ "$stack_missing" = true ]; then
      echo "Pulumi.${stack##*/}.yaml: keeping its encryptionsalt for its secure: values; if \`stack init\` says" \
        "incorrect passphrase, set the passphrase that made them or delete them and the salt" >&2
    fi
  fi
  if [ -n "$passphrase_provider" ]; then
    pulumi stack init "$stack" --secrets-provider "$passphrase_provider"
  else
    pulumi stack init "$stack"
  fi
fi
exec "$@"
