# Sourced by the deploy tests: podman as these machines run it, with its images and state under
# $WAL_DEPLOY_CACHE (default ~/.cache/walserver/deploy), so that base images are made once.
# Installs what is missing, from Debian: podman; runc (crun refuses here: "cgroups in hybrid
# mode not supported"); debootstrap, for the base images; and docker-compose (1.29), which
# deploy_test.sh points at podman's Docker API. Debian's podman-compose (1.0.3) knows neither
# profiles nor depends_on's conditions, and newer ones skip the health conditions on podman 4.3,
# which cannot wait for them.
deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(cd "$deploy_dir/../.." && pwd)
cache=${WAL_DEPLOY_CACHE:-$HOME/.cache/walserver/deploy}
mkdir -p "$cache"

missing=()
for tool in podman runc debootstrap docker-compose; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "deploy: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export CONTAINERS_CONF=$deploy_dir/containers.conf
# Images and containers in the cache, not in /var/lib/containers.
export CONTAINERS_STORAGE_CONF=$cache/storage.conf
cat >"$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "/run/walserver-deploy"
CONF
