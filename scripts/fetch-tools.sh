#!/usr/bin/env bash
# Put kind and the Pulumi CLI on PATH for `make up`: the host's when they fit the pins, otherwise
# the pinned releases fetched into .tools/bin (first on the Makefile's PATH), verified against the
# checksums each release publishes. kind must be the pinned release: kindest/node images are built
# per kind release and are not guaranteed to work with another. The Pulumi CLI may be newer.
set -euo pipefail

tools_dir="${1:?tools dir}"
kind_version="${2:?kind version}"
pulumi_version="${3:?pulumi version}"
bin="$tools_dir/bin"
mkdir -p "$bin"

os="$(uname -s | tr '[:upper:]' '[:lower:]')"
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64; pulumi_arch=x64 ;;
  aarch64 | arm64) arch=arm64; pulumi_arch=arm64 ;;
  *) echo "unsupported CPU architecture $(uname -m)" >&2; exit 1 ;;
esac

sha256() {
  if command -v sha256sum >/dev/null; then sha256sum "$1" | cut -d' ' -f1; else shasum -a 256 "$1" | cut -d' ' -f1; fi
}

# verify FILE EXPECTED: refuse anything whose digest differs from the published one.
verify() {
  local actual
  actual="$(sha256 "$1")"
  if [ "$actual" != "$2" ]; then
    echo "checksum mismatch for $1: expected $2, got $actual" >&2
    rm -f "$1"
    exit 1
  fi
}

download() { curl --fail --silent --show-error --location --retry 3 --output "$2" "$1"; }

# at_least HAVE WANT: version HAVE (vX.Y.Z, any suffix ignored) is WANT or newer.
at_least() {
  awk -v have="${1#v}" -v want="${2#v}" 'BEGIN {
    split(have, h, "."); split(want, w, ".")
    for (i = 1; i <= 3; i++) { if (h[i] + 0 > w[i] + 0) exit 0; if (h[i] + 0 < w[i] + 0) exit 1 }
    exit 0
  }'
}
kind_fits() { [ "$("$1" version 2>/dev/null | awk '{ print $2 }')" = "$kind_version" ]; }
pulumi_fits() { at_least "$("$1" version 2>/dev/null || echo v0)" "$pulumi_version"; }

# fits TOOL: the tool the Makefile's PATH resolves (ours in $bin, else the host's) fits its pin.
# One of ours that no longer fits (the pin moved) is removed, so the host's or a fresh fetch wins.
fits() {
  local tool="$1" found
  if [ -x "$bin/$tool" ]; then
    if "${tool}_fits" "$bin/$tool"; then return 0; fi
    echo "$bin/$tool does not match the pinned version; replacing it" >&2
    find "$bin" -type l -lname "../$tool/*" -exec rm -f {} + 2>/dev/null || true
    rm -rf "${bin:?}/$tool" "${tools_dir:?}/$tool"
  fi
  found="$(command -v "$tool" || true)"
  [ -n "$found" ] || return 1
  if "${tool}_fits" "$found"; then return 0; fi
  echo "$found is not the pinned $tool; fetching the pinned release into $bin" >&2
  return 1
}

if ! fits kind; then
  asset="kind-$os-$arch"
  url="https://github.com/kubernetes-sigs/kind/releases/download/$kind_version/$asset"
  echo "fetching kind $kind_version" >&2
  download "$url" "$bin/kind.download"
  download "$url.sha256sum" "$bin/kind.sha256sum"
  verify "$bin/kind.download" "$(cut -d' ' -f1 "$bin/kind.sha256sum")"
  rm -f "$bin/kind.sha256sum"
  chmod +x "$bin/kind.download"
  mv "$bin/kind.download" "$bin/kind"
fi

if ! fits pulumi; then
  plain="${pulumi_version#v}"
  asset="pulumi-$pulumi_version-$os-$pulumi_arch.tar.gz"
  base="https://github.com/pulumi/pulumi/releases/download/$pulumi_version"
  echo "fetching the Pulumi CLI $pulumi_version" >&2
  download "$base/$asset" "$tools_dir/$asset"
  download "$base/pulumi-$plain-checksums.txt" "$tools_dir/pulumi-checksums.txt"
  expected="$(awk -v a="$asset" '$2 == a { print $1 }' "$tools_dir/pulumi-checksums.txt")"
  [ -n "$expected" ] || { echo "$asset is not listed in pulumi-$plain-checksums.txt" >&2; exit 1; }
  verify "$tools_dir/$asset" "$expected"
  tar -xzf "$tools_dir/$asset" -C "$tools_dir"
  rm -f "$tools_dir/$asset" "$tools_dir/pulumi-checksums.txt"
  for binary in "$tools_dir"/pulumi/*; do ln -sf "../pulumi/$(basename "$binary")" "$bin/$(basename "$binary")"; done
fi
