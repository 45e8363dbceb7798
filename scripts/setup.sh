#!/usr/bin/env bash
# Installs the Debian 12 packages walserver needs, and only those that are missing, and builds
# librdkafka from its release source once (scripts/librdkafka.sh; Debian 12's 2.0.2 is too old).
#   scripts/setup.sh          build and run
#   scripts/setup.sh --test   also what the tests need (Java and Maven for Kafka, kcat, grpcurl,
#                             and the Rust client's crates)
set -euo pipefail

packages=(g++ cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libgtest-dev libgmock-dev
  libcpp-httplib-dev libssl-dev libbrotli-dev nlohmann-json3-dev
  libsasl2-dev libzstd-dev liblz4-dev zlib1g-dev libcurl4-openssl-dev python3)  # for librdkafka
if [[ "${1:-}" == "--test" ]]; then
  # iproute2: the fault cluster's network namespaces (tests/kafka/network.sh).
  packages+=(kcat clang-format clang libclang-rt-14-dev openssl default-jre-headless maven python3 python3-yaml curl
    iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# grpcurl is not a Debian package; the Go toolchain builds it from the Go module proxy into
# ~/go/bin (test.sh puts that on PATH). Needs Go 1.21 or newer.
if [[ "${1:-}" == "--test" ]] && ! command -v grpcurl >/dev/null && [[ ! -x "$HOME/go/bin/grpcurl" ]]; then
  # The machine's Go (1.21 or newer); Debian 12's golang-go (1.19) is too old for grpcurl.
  go=/usr/local/go/bin/go
  [[ -x "$go" ]] || go=$(command -v go) || { echo "setup: grpcurl needs Go 1.21 or newer" >&2; exit 1; }
  echo "setup: installing grpcurl with $go" >&2
  "$go" install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
fi

# Cargo 1.85 or newer fetches librdkafka's source (its lock file and some of the crates it
# resolves need it), and with rustfmt and clippy it builds the Rust client (client/rust, tonic
# 0.14) for the tests: the machine's rustup toolchain (~/.cargo/bin, first on PATH), or Debian's
# packages where they are new enough (Debian 12's 1.63 is not, and is not installed). The
# client's crates and walpeer's (bench/peer) are fetched once, as their Cargo.lock files pin
# them, into ~/.cargo/registry; test.sh then builds offline.
export PATH="$HOME/.cargo/bin:$PATH"
at_least_1_85() { [[ "$(printf '%s\n1.85.0\n' "$1" | sort -V | head -n1)" == "1.85.0" ]]; }
rust_ok() {
  command -v cargo >/dev/null && at_least_1_85 "$(rustc --version | awk '{print $2}')" || return 1
  [[ "${1:-}" != "--test" ]] ||
    { cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; }
}
if ! rust_ok "${1:-}"; then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq || true
  candidate=$(apt-cache policy rustc 2>/dev/null | awk '/Candidate:/ {print $2}' | sed 's/^[0-9]*://; s/[+~-].*//')
  if [[ -n "$candidate" && "$candidate" != "(none)" ]] && at_least_1_85 "$candidate"; then
    echo "setup: installing Debian's Rust $candidate" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      cargo rustc rustfmt rust-clippy >/dev/null
  fi
fi
if ! rust_ok "${1:-}"; then
  echo "setup: fetching librdkafka's source needs cargo and rustc 1.85 or newer (the tests also" \
    "rustfmt and clippy); found: $(rustc --version 2>/dev/null || echo no rustc), and Debian" \
    "offers ${candidate:-nothing newer}. Install a toolchain with rustup (https://rustup.rs," \
    "default profile) and run this again." >&2
  exit 1
fi
if [[ "${1:-}" == "--test" ]]; then
  for crate in client/rust bench/peer; do
    (cd "$(dirname "$0")/../$crate" &&
      { cargo fetch --locked --offline >/dev/null 2>&1 || cargo fetch --locked; })
  done
  # And those of the client's oldest-versions check (test.sh).
  "$(dirname "$0")/rust_minimal_versions.sh" --fetch
fi

"$(dirname "$0")/librdkafka.sh" >/dev/null
