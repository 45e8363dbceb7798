#!/usr/bin/env bash
# Installs what is missing, builds, and runs walserver in the foreground. With no --brokers it
# runs on the embedded in-process Kafka mock: data lives in memory only. Arguments are passed to
# walserver (see ./build/server/walserver --help).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh walserver walctl
listen=127.0.0.1:50051
for arg in "$@"; do
  case "$arg" in --listen=*) listen=${arg#--listen=} ;; esac
done
cat <<TRY

walserver is starting on $listen (metrics on http://127.0.0.1:9464/metrics).
In another terminal, try:

  ./build/client/walctl --server=$listen create 1
  ./build/client/walctl --server=$listen append 1 hello world
  ./build/client/walctl --server=$listen read 1
  ./build/client/walctl --server=$listen truncate 1 1
  ./build/client/walctl --server=$listen info 1
  ./build/client/walctl --server=$listen ls

Stop it with Ctrl-C.

TRY
exec ./build/server/walserver --listen="$listen" "$@"
