#!/usr/bin/env bash
# Installs the Debian 12 packages walserver needs, and only those that are missing.
#   scripts/setup.sh          build and run
#   scripts/setup.sh --test   also what the tests need (Java and Maven for Kafka, kcat)
set -euo pipefail

packages=(g++ cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librdkafka-dev libabsl-dev libspdlog-dev libgtest-dev libgmock-dev
  libcpp-httplib-dev libssl-dev libbrotli-dev nlohmann-json3-dev)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(kcat clang-format clang libclang-rt-14-dev openssl default-jre-headless maven python3 python3-yaml curl)
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
