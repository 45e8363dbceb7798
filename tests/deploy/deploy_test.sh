#!/usr/bin/env bash
# Runs the deploy files as an operator would, with podman (docs/TESTING.md, "The deploy test"):
#   1. deploy/Dockerfile built as written, both stages;
#   2. docker-compose.yml, unchanged: Kafka and walserver healthy, the walctl-smoke job exits 0,
#      the image serving /metrics as its non-root user; with --profile monitoring, Prometheus
#      scrapes walserver;
#   3. deploy/k8s/walserver-sidecar.yaml's Pod with `podman kube play`, against that Kafka: the
#      datanode placeholder, another user of the group, reaches walserver through the shared
#      unix socket, and the sidecar's probe passes;
#   4. `down` leaves nothing running;
#   5. deploy/systemd/walserver.service passes `systemd-analyze verify` without a remark.
# Base images are made once (images.sh); what a run starts, it removes, and what a killed run
# left, the next run removes first.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$repo_dir"

project=walserver-deploy-test
pod=datanode-0
volumes=(wal-socket walserver-config)  # the Pod's
kube_yaml=$cache/kube-play.yaml
run_dir=/run/walserver-deploy
export DOCKER_HOST=unix://$run_dir/docker.sock
compose=(timeout 600 docker-compose -p "$project" -f docker-compose.yml)
step() { echo "== deploy: $*" >&2; }
fail() {
  echo "deploy_test: FAILED: $*" >&2
  exit 1
}
# Waits up to $1 s for the command after it to succeed.
wait_for() {
  local until=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < until)) || return 1
    sleep 1
  done
}
health() { podman inspect --format '{{.State.Health.Status}}' "$1" 2>/dev/null || echo gone; }
healthy() { [[ "$(health "$1")" == healthy ]]; }
# What is left of the test's containers, Pod, volumes and network, one name a line.
left() {
  podman ps -a --filter "label=com.docker.compose.project=$project" --format '{{.Names}}' &&
    podman pod ps --filter "name=^$pod\$" --format '{{.Name}}' &&
    podman volume ls --format '{{.Name}}' | { grep -Fx -e "${volumes[0]}" -e "${volumes[1]}" || true; } &&
    podman network ls --format '{{.Name}}' | { grep -Fx "${project}_default" || true; }
}
show_log() {
  tail -30 "$1" >&2
  fail "$2"
}

# What a run (this one, or one that was killed) left.
remove_left() {
  [[ ! -f "$kube_yaml" ]] || timeout 120 podman kube down "$kube_yaml" >/dev/null 2>&1 || true
  podman pod rm -f -t 0 "$pod" >/dev/null 2>&1 || true
  "${compose[@]}" --profile monitoring down -t 5 >/dev/null 2>&1 || true
  podman volume rm -f "${volumes[@]}" >/dev/null 2>&1 || true
}
helpers=()
cleanup() {
  remove_left
  ((${#helpers[@]} == 0)) || kill "${helpers[@]}" 2>/dev/null || true
  rm -f "$run_dir/service.pid"
}
trap cleanup EXIT

step "1. podman build -f deploy/Dockerfile, and the base images it and the others name"
"$deploy_dir/images.sh" --walserver
[[ "$(podman inspect --format '{{.Config.User}}' localhost/walserver:latest)" == walserver ]] ||
  fail "the image does not run as its user walserver"

# The Docker API that docker-compose talks to (a killed run's goes first).
mkdir -p "$run_dir"
[[ ! -f "$run_dir/service.pid" ]] || kill "$(cat "$run_dir/service.pid")" 2>/dev/null || true
rm -f "${DOCKER_HOST#unix://}"
# In a session of its own: a TERM sent to the test's process group (test.sh ending its jobs)
# must leave it up for cleanup's compose down, which ends it after.
setsid podman system service -t 0 "$DOCKER_HOST" >"$cache/podman-service.log" 2>&1 &
helpers+=($!)
echo $! >"$run_dir/service.pid"
wait_for 30 test -S "${DOCKER_HOST#unix://}" || fail "podman's API did not start"
# Containers' health checks, every 2 s: podman runs them from systemd timers, and there is no
# systemd here (PID 1 is not an init system), so the test is their timer.
(while true; do
  for c in $(podman ps --filter health=starting --filter health=healthy --filter health=unhealthy \
    --format '{{.Names}}' 2>/dev/null); do
    timeout 30 podman healthcheck run "$c" >/dev/null 2>&1 || true
  done
  sleep 2
done) &
helpers+=($!)
remove_left

step "2. compose up"
"${compose[@]}" up -d >"$cache/compose.log" 2>&1 || show_log "$cache/compose.log" "compose up"
smoke=${project}_walctl-smoke_1
code=$(timeout 300 podman wait "$smoke") ||
  fail "walctl-smoke did not run to its end within 300 s (walserver: $(health "${project}_walserver_1"))"
podman logs "$smoke" >"$cache/smoke.log" 2>&1
[[ "$code" == 0 ]] || show_log "$cache/smoke.log" "walctl-smoke failed (exit $code)"
grep -q "compose" "$cache/smoke.log" || fail "walctl-smoke did not read back what it appended"
healthy "${project}_kafka_1" || fail "kafka is $(health "${project}_kafka_1")"
healthy "${project}_walserver_1" || fail "walserver is $(health "${project}_walserver_1")"
[[ "$(podman exec "${project}_walserver_1" id -un)" == walserver ]] || fail "walserver is not its own user"
metrics=$(podman exec "${project}_walserver_1" curl -fsS http://127.0.0.1:9464/metrics) ||
  fail "/metrics does not answer"
grep -q '^walserver_build_info' <<<"$metrics" || fail "/metrics has no walserver_build_info"

step "2b. compose --profile monitoring up prometheus"
"${compose[@]}" --profile monitoring up -d prometheus >>"$cache/compose.log" 2>&1 ||
  show_log "$cache/compose.log" "compose --profile monitoring up prometheus"
scraped_up() {
  local targets
  targets=$(podman exec "${project}_walserver_1" curl -fsS http://prometheus:9090/api/v1/targets) &&
    python3 -c 'import json, sys
targets = json.loads(sys.argv[1])["data"]["activeTargets"]
sys.exit(0 if any(t["labels"]["job"] == "walserver" and t["health"] == "up" for t in targets) else 1)' \
      "$targets"
}
wait_for 120 scraped_up || fail "Prometheus does not show walserver up"

step "3. podman kube play deploy/k8s/walserver-sidecar.yaml"
# podman kube play publishes containerPorts on the host, as compose's walserver does: it goes
# first. Kafka stays, and the Pod joins its network.
"${compose[@]}" rm -s -f walserver prometheus walctl-smoke >>"$cache/compose.log" 2>&1 ||
  show_log "$cache/compose.log" "compose rm"
# The Pod as written; its ConfigMap pointed at the compose file's single broker (an operator's
# own settings: the file's are for a cluster of three).
python3 - deploy/k8s/walserver-sidecar.yaml "$kube_yaml" <<'PY'
import re, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
for doc in docs:
    if doc["kind"] == "ConfigMap":
        conf = doc["data"]["walserver.conf"]
        for key, value in [("brokers", "kafka:9092"), ("replication_factor", "1"),
                           ("min_insync_replicas", "1")]:
            conf = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", conf)
        doc["data"]["walserver.conf"] = conf
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
# The emptyDir as Kubernetes makes it for fsGroup 10001 (group-owned, setgid, group-writable),
# which podman kube play does not do: it gives a new volume to whichever container mounts it
# first, the datanode as often as not, and walserver could not create its socket.
podman volume create wal-socket >/dev/null
socket_dir=$(podman volume inspect --format '{{.Mountpoint}}' wal-socket)
chgrp 10001 "$socket_dir" && chmod 2775 "$socket_dir"
network=$(podman inspect --format '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' \
  "${project}_kafka_1")
timeout 600 podman kube play --network "$network" "$kube_yaml" >"$cache/kube-play.log" 2>&1 ||
  show_log "$cache/kube-play.log" "kube play"
wait_for 120 healthy "$pod-walserver" || {
  podman logs "$pod-walserver" 2>&1 | tail -20 >&2
  fail "the sidecar's liveness probe did not pass: $(health "$pod-walserver")"
}
podman exec "$pod-walserver" curl -fsS http://127.0.0.1:9464/healthz >/dev/null ||
  fail "the readiness probe's /healthz does not answer"
[[ "$(podman exec "$pod-datanode" id -u)" == 10002 ]] || fail "the datanode does not run as 10002"
podman exec "$pod-datanode" walctl --server=unix:///var/run/wal/wal.sock create 7 >/dev/null ||
  fail "the datanode cannot reach walserver through the shared socket"
listed=$(podman exec "$pod-datanode" walctl --server=unix:///var/run/wal/wal.sock ls) ||
  fail "the datanode cannot list namespaces through the shared socket"
grep -q '^7 ' <<<"$listed" || fail "the datanode does not see the namespace it created"

step "4. down"
timeout 600 podman kube down "$kube_yaml" >/dev/null || fail "kube down"
podman volume rm -f "${volumes[@]}" >/dev/null
"${compose[@]}" --profile monitoring down -t 5 >>"$cache/compose.log" 2>&1 ||
  show_log "$cache/compose.log" "compose down"
remains=$(left) || fail "could not list what is left"
[[ -z "$remains" ]] || fail "left behind: $(tr '\n' ' ' <<<"$remains")"

step "5. systemd-analyze verify deploy/systemd/walserver.service"
# verify wants the unit's ExecStart in place: the image's walserver, in /usr/local/bin of a
# mount namespace of its own, as the unit's install steps put it there. Any remark fails (an
# unknown key is only a warning to it).
binary=$cache/walserver
rm -f "$binary"
container=$(podman create localhost/walserver:latest)
podman cp "$container:/usr/local/bin/walserver" "$binary" || true
podman rm "$container" >/dev/null
[[ -x "$binary" ]] || fail "walserver could not be copied out of the image"
remarks=$(unshare --mount sh -ec 'mount -t tmpfs tmpfs /usr/local/bin &&
  install -m 0755 "$1" /usr/local/bin/ && systemd-analyze verify deploy/systemd/walserver.service' \
  - "$binary" 2>&1) || fail "systemd-analyze verify: $remarks"
[[ -z "$remarks" ]] || fail "systemd-analyze verify: $remarks"

echo "deploy_test: all passed" >&2
