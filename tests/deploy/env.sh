# Sourced by the deploy tests: podman as these machines run it, with its images and state under
# $WAL_DEPLOY_CACHE (default ~/.cache/walserver/deploy), so that base images are made once. One
# deploy run or image build at a time per cache (a lock the first script to source this takes).
# Installs what is missing, from Debian: podman with its network stack (netavark, aardvark-dns
# for names) and catatonit (the Pod's infra container, which no registry can provide); runc (crun
# refuses here: "cgroups in hybrid mode not supported"); debootstrap, for the base images; and
# docker-compose (1.29), which deploy_test.sh points at podman's Docker API. Debian's
# podman-compose (1.0.3) knows neither profiles nor depends_on's conditions, and newer ones skip
# the health conditions on podman 4.3, which cannot wait for them.
deploy_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(cd "$deploy_dir/../.." && pwd)
cache=${WAL_DEPLOY_CACHE:-$HOME/.cache/walserver/deploy}
mkdir -p "$cache"
export PATH="$HOME/.cargo/bin:$PATH"  # rustup's toolchain, for images.sh

if [[ -z "${WAL_DEPLOY_LOCKED:-}" ]]; then
  exec 8>"$cache/lock"
  flock 8
  export WAL_DEPLOY_LOCKED=1
fi

missing=()
for package in podman netavark aardvark-dns catatonit iptables runc debootstrap docker-compose \
  systemd python3-yaml; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "deploy: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

export CONTAINERS_CONF=$deploy_dir/containers.conf
# Images and containers in the cache, not in /var/lib/containers.
export CONTAINERS_STORAGE_CONF=$cache/storage.conf
printf '[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "/run/walserver-deploy"\n' \
  "$cache/storage" >"$cache/storage.conf.new"
cmp -s "$cache/storage.conf.new" "$CONTAINERS_STORAGE_CONF" || mv "$cache/storage.conf.new" "$CONTAINERS_STORAGE_CONF"
rm -f "$cache/storage.conf.new"
