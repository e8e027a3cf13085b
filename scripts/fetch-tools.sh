#!/usr/bin/env bash
# Put kind and the Pulumi CLI on PATH for `make up`: the host's when they fit the pins, otherwise
# the pinned releases fetched into .tools/bin (first on the Makefile's PATH), verified against the
# checksums each release publishes. kind must be the pinned release: kindest/node images are built
# per kind release and are not guaranteed to work with another. The Pulumi CLI may be newer.
# An empty kind version leaves kind out (a stack on an existing management cluster never runs it).
# Downloads go to a temporary directory; only verified tools are moved into .tools.
set -euo pipefail

tools_dir="${1:?tools dir}"
kind_version="${2?kind version, or empty for none}"
pulumi_version="${3:?pulumi version}"
bin="$tools_dir/bin"
mkdir -p "$bin"

os="$(uname -s | tr '[:upper:]' '[:lower:]')"
case "$os" in
  linux | darwin) ;;
  # kind and the Pulumi CLI publish Windows builds too, but the program's commands need a POSIX shell and Docker's Linux engine.
  *) echo "unsupported operating system $(uname -s): kind and the Pulumi CLI are fetched for Linux and macOS; install them yourself" >&2; exit 1 ;;
esac
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
    echo "checksum mismatch for $(basename "$1"): expected $2, got $actual" >&2
    exit 1
  fi
}

# download URL FILE INSTEAD: fetch URL into FILE, or stop with one line saying what to do instead.
download() {
  if ! curl --fail --silent --show-error --location --retry 3 --output "$2" "$1"; then
    echo "could not fetch $1: put $3 on PATH instead, or retry \`make tools\`" >&2
    exit 1
  fi
}

# at_least HAVE WANT: version HAVE (vX.Y.Z[-pre][+build]) is WANT or newer, by SemVer precedence:
# a pre-release comes before its release (v3.272.0-alpha.1 < v3.272.0); build metadata is ignored.
at_least() {
  awk -v have="${1#v}" -v want="${2#v}" '
    function cmp_id(a, b,   an, bn) {
      an = (a ~ /^[0-9]+$/); bn = (b ~ /^[0-9]+$/)
      if (an && bn) return (a + 0 > b + 0) - (a + 0 < b + 0)
      if (an != bn) return an ? -1 : 1
      return (a > b) - (a < b)
    }
    BEGIN {
      sub(/\+.*/, "", have); sub(/\+.*/, "", want)
      hp = index(have, "-"); wp = index(want, "-")
      hpre = hp ? substr(have, hp + 1) : ""; if (hp) have = substr(have, 1, hp - 1)
      wpre = wp ? substr(want, wp + 1) : ""; if (wp) want = substr(want, 1, wp - 1)
      split(have, h, "."); split(want, w, ".")
      for (i = 1; i <= 3; i++) { if (h[i] + 0 > w[i] + 0) exit 0; if (h[i] + 0 < w[i] + 0) exit 1 }
      if (hpre == "") exit 0
      if (wpre == "") exit 1
      n = split(hpre, hx, "."); m = split(wpre, wx, ".")
      for (i = 1; i <= n && i <= m; i++) { c = cmp_id(hx[i], wx[i]); if (c > 0) exit 0; if (c < 0) exit 1 }
      if (n >= m) exit 0; exit 1
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

# Downloads, checksums and the unpacked archive stay here until verified; nothing is left on failure.
# Inside tools_dir, so the final mv is a rename on one filesystem.
tmp="$(mktemp -d "$tools_dir/.download.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [ -n "$kind_version" ] && ! fits kind; then
  asset="kind-$os-$arch"
  url="https://github.com/kubernetes-sigs/kind/releases/download/$kind_version/$asset"
  instead="kind $kind_version (exactly that release)"
  echo "fetching kind $kind_version" >&2
  download "$url" "$tmp/kind" "$instead"
  download "$url.sha256sum" "$tmp/kind.sha256sum" "$instead"
  verify "$tmp/kind" "$(cut -d' ' -f1 "$tmp/kind.sha256sum")"
  chmod +x "$tmp/kind"
  mv "$tmp/kind" "$bin/kind"
fi

if ! fits pulumi; then
  plain="${pulumi_version#v}"
  asset="pulumi-$pulumi_version-$os-$pulumi_arch.tar.gz"
  base="https://github.com/pulumi/pulumi/releases/download/$pulumi_version"
  instead="the Pulumi CLI $pulumi_version or newer"
  echo "fetching the Pulumi CLI $pulumi_version" >&2
  download "$base/$asset" "$tmp/$asset" "$instead"
  download "$base/pulumi-$plain-checksums.txt" "$tmp/pulumi-checksums.txt" "$instead"
  expected="$(awk -v a="$asset" '$2 == a { print $1 }' "$tmp/pulumi-checksums.txt")"
  [ -n "$expected" ] || { echo "$asset is not listed in pulumi-$plain-checksums.txt" >&2; exit 1; }
  verify "$tmp/$asset" "$expected"
  mkdir "$tmp/unpacked"
  tar -xzf "$tmp/$asset" -C "$tmp/unpacked"
  [ -x "$tmp/unpacked/pulumi/pulumi" ] || { echo "$asset holds no pulumi/pulumi" >&2; exit 1; }
  rm -rf "${tools_dir:?}/pulumi"
  mv "$tmp/unpacked/pulumi" "$tools_dir/pulumi"
  for binary in "$tools_dir"/pulumi/*; do ln -sf "../pulumi/$(basename "$binary")" "$bin/$(basename "$binary")"; done
fi
