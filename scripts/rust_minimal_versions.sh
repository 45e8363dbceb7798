#!/usr/bin/env bash
# Builds the Rust client (client/rust) with the oldest tonic and prost releases its Cargo.toml
# allows (0.14.0, pinned by client/rust/Cargo.minimal.lock) and runs its tests, in a scratch copy:
# a datanode that pins an older 0.14 release than our Cargo.lock must be able to use the crate.
# The tests need WALSERVER and WAL_TEST_BROKERS, as `cargo test` in client/rust does.
#   scripts/rust_minimal_versions.sh            build and test
#   scripts/rust_minimal_versions.sh --update   write Cargo.minimal.lock again from Cargo.lock
#                                               (after a dependency changed; needs crates.io)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# build.rs reads ../../proto: the copy keeps the layout.
mkdir -p "$scratch/client"
cp -r proto "$scratch/proto"
mkdir "$scratch/client/rust"
(cd client/rust && cp -r Cargo.toml build.rs rustfmt.toml src tests examples "$scratch/client/rust/")
crate=$scratch/client/rust

if [[ "${1:-}" == "--update" ]]; then
  cp client/rust/Cargo.lock "$crate/Cargo.lock"
  # Each package pins the next: repeat until every one is at 0.14.0.
  packages=(tonic-prost-build tonic-prost tonic-build tonic prost-build prost-derive prost-types prost)
  for _ in 1 2 3; do
    for package in "${packages[@]}"; do
      (cd "$crate" && cargo update -q -p "$package" --precise 0.14.0 2>/dev/null) || true
    done
  done
  for package in "${packages[@]}"; do
    grep -A1 "^name = \"$package\"$" "$crate/Cargo.lock" | grep -q 'version = "0.14.0"' ||
      { echo "rust_minimal_versions: $package did not go to 0.14.0" >&2; exit 1; }
  done
  cp "$crate/Cargo.lock" client/rust/Cargo.minimal.lock
  echo "rust_minimal_versions: wrote client/rust/Cargo.minimal.lock"
  exit 0
fi

cp client/rust/Cargo.minimal.lock "$crate/Cargo.lock"
cd "$crate"
cargo fetch --locked --offline >/dev/null 2>&1 || cargo fetch --locked
grep -A1 '^name = "tonic"$' Cargo.lock | grep version
cargo test --offline --locked -- --test-threads=2
