#!/usr/bin/env bash
# Configures (once) and builds walserver with CMake, Ninja and ccache.
#   scripts/build.sh [ninja targets...]          the plain build, in $BUILD_DIR (build/)
#   scripts/build.sh --asan [ninja targets...]   clang, AddressSanitizer and
#                                                UndefinedBehaviorSanitizer, and the libFuzzer
#                                                targets, in build-asan/
#   scripts/build.sh --tsan [ninja targets...]   clang, ThreadSanitizer, in build-tsan/
# Extra CMake settings go in $CMAKE_ARGS. The sanitizer builds are clang's: it compiles them
# several times faster than g++ does (docs/TESTING.md, "What scripts/test.sh runs").
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake_args=${CMAKE_ARGS:-}
case "${1:-}" in
  --asan)
    shift
    build=build-asan
    export CC=clang CXX=clang++
    cmake_args="-DWAL_SANITIZE=address,undefined -DWAL_FUZZ=ON $cmake_args"
    ;;
  --tsan)
    shift
    build=build-tsan
    export CC=clang CXX=clang++
    cmake_args="-DWAL_SANITIZE=thread $cmake_args"
    ;;
esac
# ccache hits across clones (CI builds a fresh clone in another directory).
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
if [[ -n "${CC:-}" && -f "$build/CMakeCache.txt" ]] &&
  ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*$CXX\$" "$build/CMakeCache.txt"; then
  # Configured with another compiler (a sanitizer build from before they were clang's): CMake
  # cannot change that in place.
  rm -rf "$build"
fi
if [[ ! -f "$build/build.ninja" || -n "$cmake_args" ]]; then
  # shellcheck disable=SC2086
  cmake -S . -B "$build" -G Ninja $cmake_args >/dev/null
fi
ninja -C "$build" "$@"
