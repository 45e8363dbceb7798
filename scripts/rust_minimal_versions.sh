#!/usr/bin/env bash
# Builds the Rust client (client/rust) with the oldest tonic and prost releases its Cargo.toml
# allows (0.14.0, pinned by client/rust/Cargo.minimal.lock) and runs its tests, in a scratch copy:
# a datanode that pins an older 0.14 release than our Cargo.lock must be able to use the crate.
# The tests need WALSERVER and WAL_TEST_BROKERS, as `cargo test` in client/rust does.
#   scripts/rust_minimal_versions.sh            build and test
#   scripts/rust_minimal_versions.sh --fetch    only fetch the crates that lock file names
#                                               (setup.sh --test, so that the tests run offline)
#   scripts/rust_minimal_versions.sh --update   write Cargo.minimal.lock again from Cargo.lock
#                                               (after a dependency changed; needs crates.io)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# A target directory of its own (resolved before any cd): these builds must not replace the main
# ones, whose examples the tests run.
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-$HOME/.cache/walserver/rust-target}")
export CARGO_TARGET_DIR=$target_dir/minimal-versions
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# build.rs reads ../../proto: the copy keeps the layout.
mkdir -p "$scratch/client" "$scratch/tests"
cp -r proto "$scratch/proto"
# A test changes a topic's settings through tests/kafka/kafka.sh, found beside the crate.
cp -r tests/kafka "$scratch/tests/kafka"
mkdir "$scratch/client/rust"
(cd client/rust && cp -r Cargo.toml build.rs rustfmt.toml src tests examples "$scratch/client/rust/")
crate=$scratch/client/rust
packages=(tonic-prost-build tonic-prost tonic-build tonic prost-build prost-derive prost-types prost)
# Fails unless every one of those is at 0.14.0 in the lock file $1.
check_versions() {
  for package in "${packages[@]}"; do
    grep -A1 "^name = \"$package\"$" "$1" | grep -q 'version = "0.14.0"' ||
      { echo "rust_minimal_versions: $package is not at 0.14.0 in $1" >&2; exit 1; }
  done
}

if [[ "${1:-}" == "--update" ]]; then
  cp client/rust/Cargo.lock "$crate/Cargo.lock"
  # Each package pins the next: repeat until every one is at 0.14.0.
  for _ in 1 2 3; do
    for package in "${packages[@]}"; do
      (cd "$crate" && cargo update -q -p "$package" --precise 0.14.0 2>/dev/null) || true
    done
  done
  check_versions "$crate/Cargo.lock"
  cp "$crate/Cargo.lock" client/rust/Cargo.minimal.lock
  echo "rust_minimal_versions: wrote client/rust/Cargo.minimal.lock"
  exit 0
fi

check_versions client/rust/Cargo.minimal.lock
cp client/rust/Cargo.minimal.lock "$crate/Cargo.lock"
cd "$crate"
cargo fetch --locked --offline >/dev/null 2>&1 || cargo fetch --locked
[[ "${1:-}" != "--fetch" ]] || exit 0
# The datanode workload (20 s) has nothing version-specific the other tests lack.
cargo test --offline --locked -- --test-threads=2 --skip a_datanode_of_1000_regions
