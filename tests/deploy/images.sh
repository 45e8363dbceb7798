#!/usr/bin/env bash
# Makes the base images that deploy/Dockerfile, docker-compose.yml and the k8s manifest name,
# under those names, without a registry (none can be pulled here); once, in the cache, and again
# when what they are made from changes (a label on each holds a hash of it):
#   debian:12-slim           debootstrap of Debian 12 (minbase) from Debian's archive
#   rust:1.85-bookworm       that, with a C toolchain and this machine's rustup toolchain
#   apache/kafka:4.1.1       that, with a JRE and the broker jars the tests fetch; configured by
#                            KAFKA_* variables and checked by kafka-broker-api-versions.sh as
#                            the real image is (images/kafka/)
#   prom/prometheus:v2.53.0  that, with Debian's prometheus package
# They stand in for the registry's images as far as the deploy files use them; the versions
# inside are Debian 12's and this machine's, not the tags'.
#   tests/deploy/images.sh --walserver   then also walserver:latest, from deploy/Dockerfile as
#                                        written (podman's layer cache makes it quick when the
#                                        source did not change)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

say() { echo "images.sh: $*" >&2; }
sysroot=$(rustc --print sysroot)
[[ "$sysroot" == */toolchains/* ]] || {
  say "needs a rustup toolchain to copy into rust:1.85-bookworm (rustc's sysroot is $sysroot)"
  exit 1
}
# The certificate authorities this machine adds to Debian's (an egress proxy's, here): the
# images trust them once ca-certificates is installed in them, as this machine does, so that a
# build inside them reaches crates.io as the machine's own builds do.
cas=(/usr/local/share/ca-certificates/*.crt)
[[ -e "${cas[0]}" ]] || cas=()
inputs=$( (cd "$deploy_dir" && cat images.sh images/*.Containerfile images/kafka/*) |
  cat - "${cas[@]}" <(rustc -V) | sha256sum | cut -c1-16)
label=walserver.deploy.inputs
made() {
  [[ "$(podman image inspect --format "{{index .Labels \"$label\"}}" "$1" 2>/dev/null)" == "$inputs" ]]
}

if ! made docker.io/library/debian:12-slim; then
  say "debian:12-slim: debootstrap of Debian 12"
  rootfs=$cache/rootfs-debian12
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$cache/debootstrap.log"
  cat >"$rootfs/etc/apt/sources.list" <<LIST
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  mkdir -p "$rootfs/usr/local/share/ca-certificates"
  ((${#cas[@]} == 0)) || cp "${cas[@]}" "$rootfs/usr/local/share/ca-certificates/"
  tar -C "$rootfs" -c . | podman import -q --change 'CMD ["bash"]' --change "LABEL $label=$inputs" \
    - docker.io/library/debian:12-slim >/dev/null
  rm -rf "$rootfs"
fi

# Each RUN of a build is a container in a cgroup of its own, which a caller's SCHED_IDLE
# (test.sh) does not reach: with the default share it took as much CPU as everything else on the
# machine together, the suite's compiles and timed tests included. The smallest share makes it
# take what the rest leaves, as the caller asked.
podman_build=(podman build -q --cpu-shares=2)

# build NAME CONTEXT CONTAINERFILE: an image on the debian one, labelled with the inputs.
build() {
  "${podman_build[@]}" --label "$label=$inputs" -f "$3" -t "$1" "$2" >/dev/null
}

if ! made docker.io/library/rust:1.85-bookworm; then
  say "rust:1.85-bookworm: Debian 12 and $(rustc --version)"
  context=$cache/rust-context
  rm -rf "$context" && mkdir -p "$context"
  cp -a "$sysroot" "$context/rust"  # the toolchain rustc runs from, without its documentation
  rm -rf "$context/rust/share/doc"
  build docker.io/library/rust:1.85-bookworm "$context" "$deploy_dir/images/rust.Containerfile"
  rm -rf "$context"
fi

if ! made docker.io/apache/kafka:4.1.1; then
  say "apache/kafka:4.1.1: Debian 12, a JRE and the Kafka 4.1.1 jars"
  context=$cache/kafka-context
  rm -rf "$context" && mkdir -p "$context/libs"
  # A jar cache of its own: the suite's brokers fetch theirs at the same time.
  WAL_KAFKA_VERSION=4.1.1 WAL_KAFKA_CACHE=$cache/kafka-4.1.1 "$repo_dir/tests/kafka/kafka.sh" fetch
  cp "$cache/kafka-4.1.1/libs/"*.jar "$context/libs/"
  # kafka-broker-api-versions.sh (the compose file's health check) is in kafka-tools.
  (cd "$deploy_dir/images/kafka" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
    -DoutputDirectory="$context/libs" -Dmdep.overWriteIfNewer=true)
  cp "$deploy_dir/images/kafka/run" "$deploy_dir/images/kafka/kafka-broker-api-versions.sh" "$context/"
  build docker.io/apache/kafka:4.1.1 "$context" "$deploy_dir/images/kafka.Containerfile"
  rm -rf "$context"
fi

if ! made docker.io/prom/prometheus:v2.53.0; then
  say "prom/prometheus:v2.53.0: Debian 12's prometheus"
  build docker.io/prom/prometheus:v2.53.0 "$deploy_dir/images" \
    "$deploy_dir/images/prometheus.Containerfile"
fi

if [[ "${1:-}" == "--walserver" ]]; then
  say "walserver:latest: deploy/Dockerfile"
  # The docker format keeps the image's HEALTHCHECK (OCI's has none). The build stage is tagged
  # too, so that its layers (the packages and librdkafka above all) stay cached when the last
  # run's images are pruned below. Its compile, which runs again whenever the source changed,
  # keeps ccache's objects in the cache (a volume of the build, outside the image): a change to
  # a few files recompiles those, as on the machine itself.
  mkdir -p "$cache/ccache"
  for target in build ""; do
    "${podman_build[@]}" --format docker ${target:+--target "$target"} -f "$repo_dir/deploy/Dockerfile" \
      --volume "$cache/ccache:/root/.cache/ccache" \
      -t "localhost/walserver${target:+-$target}:latest" "$repo_dir" >"$cache/walserver-build.log" 2>&1 || {
      tail -30 "$cache/walserver-build.log" >&2
      exit 1
    }
  done
  podman image prune -f >/dev/null  # the images these replaced
fi
