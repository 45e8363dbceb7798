#!/usr/bin/env bash
# Builds the librdkafka walserver links, from its release source, once per version.
#   scripts/librdkafka.sh          build (if missing) and print the install prefix
#   scripts/librdkafka.sh --prefix print the install prefix only
#
# The source comes through cargo: scripts/librdkafka/Cargo.lock pins the crate rdkafka-sys, which
# ships the librdkafka release tree unpatched, by version and checksum. It is built with CMake as
# a shared library with SSL, SASL (PLAIN, SCRAM, GSSAPI through Cyrus SASL, OAUTHBEARER with
# OIDC through curl), zstd, lz4, snappy and gzip, as Debian builds it, and installed under
# $WAL_CACHE (default ~/.cache/walserver)/librdkafka-VERSION, with rdkafka.pc for pkg-config. A
# prefix whose build finished is never built again; a new version gets a new prefix. Needs
# cargo, CMake, Ninja, a C compiler and the -dev packages setup.sh installs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

librdkafka_version=2.12.1
prefix=${WAL_CACHE:-$HOME/.cache/walserver}/librdkafka-$librdkafka_version
if [[ "${1:-}" == "--prefix" ]]; then
  echo "$prefix"
  exit 0
fi
if [[ -f "$prefix/.complete" ]]; then
  echo "$prefix"
  exit 0
fi

log() { echo "librdkafka.sh: $*" >&2; }
# One build at a time per prefix (two clones set up at once share the cache).
mkdir -p "$(dirname "$prefix")"
exec 9>"$prefix.lock"
flock 9
if [[ -f "$prefix/.complete" ]]; then
  echo "$prefix"
  exit 0
fi
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || {
  log "cargo is needed to fetch the librdkafka source (a rustup toolchain: https://rustup.rs)"
  exit 1
}

manifest=$here/librdkafka/Cargo.toml
(cargo fetch --locked --offline --manifest-path "$manifest" >/dev/null 2>&1 ||
  cargo fetch --locked --manifest-path "$manifest") >&2
crate=$(cargo metadata --locked --offline --format-version 1 --manifest-path "$manifest" |
  python3 -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "rdkafka-sys":
        print(p["manifest_path"].rsplit("/", 1)[0])')
source=$crate/librdkafka
if ! grep -q "RD_KAFKA_VERSION *0x020c01ff" "$source/src/rdkafka.h"; then
  log "$source is not librdkafka $librdkafka_version (scripts/librdkafka/Cargo.lock and this script disagree)"
  exit 1
fi

log "building librdkafka $librdkafka_version from $source into $prefix"
started=$SECONDS
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# Every feature named, so that a missing -dev package fails here instead of building a
# librdkafka without it. (2.12.1 does not build with WITH_CURL=OFF beside SSL: it tests
# WITH_OAUTHBEARER_OIDC with #ifdef, defined as 0.)
cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib \
  -DRDKAFKA_BUILD_STATIC=OFF -DRDKAFKA_BUILD_EXAMPLES=OFF -DRDKAFKA_BUILD_TESTS=OFF \
  -DWITH_SSL=ON -DWITH_SASL=ON -DWITH_ZSTD=ON -DWITH_ZLIB=ON -DENABLE_LZ4_EXT=ON \
  -DWITH_CURL=ON -DWITH_PLUGINS=OFF >"$build/configure.log" 2>&1 || {
  tail -n 30 "$build/configure.log" >&2
  exit 1
}
for feature in SSL SASL_SCRAM ZSTD ZLIB LZ4_EXT; do
  grep -q "BUILT_WITH.*$feature" "$build/generated/config.h" ||
    { log "configured without $feature; see the packages in scripts/setup.sh"; exit 1; }
done
ninja -C "$build" install >"$build/build.log" 2>&1 || {
  tail -n 30 "$build/build.log" >&2
  exit 1
}
touch "$prefix/.complete"
log "built in $((SECONDS - started)) s"
echo "$prefix"
