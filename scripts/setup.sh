#!/usr/bin/env bash
# Installs the Debian 12 packages walserver needs, and only those that are missing.
#   scripts/setup.sh          build and run
#   scripts/setup.sh --test   also what the tests need (Java and Maven for Kafka, kcat)
set -euo pipefail

packages=(g++ cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librdkafka-dev libabsl-dev libspdlog-dev zlib1g-dev libgtest-dev libgmock-dev)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(kcat clang-format default-jre-headless maven python3)
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
