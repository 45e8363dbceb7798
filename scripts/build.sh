#!/usr/bin/env bash
# Configures (once) and builds walserver with CMake, Ninja and ccache into $BUILD_DIR (build/).
#   scripts/build.sh [ninja targets...]
# Extra CMake settings go in $CMAKE_ARGS, e.g. CMAKE_ARGS=-DWAL_SANITIZE=address,undefined.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
# ccache hits across clones (CI builds a fresh clone in another directory).
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
if [[ ! -f "$build/build.ninja" ]]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$build" -G Ninja ${CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$build" "$@"
