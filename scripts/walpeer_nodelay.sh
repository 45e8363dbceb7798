#!/usr/bin/env bash
# Builds walpeer against rskafka with TCP_NODELAY set on its broker connections (rskafka 0.6 never
# sets it: a datanode's merging worker then waits out Nagle's algorithm on every produce that
# follows another on the same connection). The patch is made at build time on a copy of the
# crate's source in a temporary folder; nothing of it enters this repository. Prints the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
target=$(realpath -m "${CARGO_TARGET_DIR:-$HOME/.cache/walserver/rust-target}")/nodelay
work=$(mktemp -d /tmp/walpeer-nodelay.XXXXXX)
trap 'rm -rf "$work"' EXIT
# The shipped walpeer's build has fetched the crate (Cargo.lock pins its version).
(cd bench/peer && cargo fetch --locked >/dev/null)
version=$(grep -A1 '^name = "rskafka"$' bench/peer/Cargo.lock | sed -n 's/^version = "\(.*\)"$/\1/p')
source=$(ls -d "$HOME"/.cargo/registry/src/*/"rskafka-$version" | head -1)
cp -r "$source" "$work/rskafka"
file=$work/rskafka/src/connection/transport.rs
line='let tcp_stream = Self::connect_tcp(broker, socks5_proxy).await?;'
grep -qF "$line" "$file" || { echo "walpeer_nodelay.sh: rskafka $version changed; patch by hand" >&2; exit 1; }
sed -i "s|$line|$line\n        tcp_stream.set_nodelay(true)?;|" "$file"
# A copy of the peer, so that the patched lock file stays in the temporary folder.
mkdir -p "$work/bench"
cp -r bench/peer "$work/bench/peer"
ln -s "$PWD/client" "$work/client"
(cd "$work/bench/peer" &&
  CARGO_TARGET_DIR=$target cargo build --offline --release --quiet \
    --config "patch.crates-io.rskafka.path=\"$work/rskafka\"")
echo "$target/release/walpeer"
