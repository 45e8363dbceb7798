#!/usr/bin/python3
"""Checks the deployment files against the binaries they deploy.

Docker does not run on the build machines, so this test does not start containers: it parses
docker-compose.yml, deploy/k8s/*.yaml, deploy/Dockerfile, deploy/systemd/walserver.service and
deploy/walserver.conf, and checks that every walserver option they use exists (asking the real
`walserver --help`), that every walctl command they run exists, and that ports, socket paths and
probe endpoints agree with each other.
"""
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WALSERVER = os.environ["WALSERVER"]
WALCTL = os.environ["WALCTL"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


help_text = subprocess.run([WALSERVER, "--help"], capture_output=True, text=True, check=True).stdout
OPTIONS = set(re.findall(r"--([a-z_]+) \(", help_text))
check({"listen", "brokers", "http_listen", "config"} <= OPTIONS, "walserver --help lists options")


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def check_walserver_args(args, where):
    """Returns the options as a dict after checking each exists."""
    options = {}
    for arg in args:
        check(arg.startswith("--"), f"{where}: '{arg}' is not an option")
        name, _, value = arg[2:].partition("=")
        check(name in OPTIONS or name.startswith("kafka."), f"{where}: unknown option --{name}")
        options[name] = value
    return options


def check_config_text(text, where):
    options = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        check("=" in line, f"{where}:{number}: not 'name = value'")
        name, _, value = line.partition("=")
        name = name.strip()
        check(name in OPTIONS or name.startswith("kafka."), f"{where}:{number}: unknown option {name}")
        options[name] = value.strip()
    return options


def check_walctl(command_line, where):
    """Every walctl invocation in a shell line uses a real command and says which server."""
    servers = []
    for part in re.split(r"&&|;|\|", command_line):
        words = shlex.split(part)
        while words and words[0] in ("do", "then", "else", "while", "true"):
            words = words[1:]  # shell keywords before the command
        if not words or words[0] != "walctl":
            continue
        globals_ = [w for w in words[1:] if w.startswith("--")]
        rest = [w for w in words[1:] if not w.startswith("--")]
        check(bool(rest), f"{where}: walctl without a command")
        if rest:
            r = subprocess.run([WALCTL, rest[0], "--help"], capture_output=True, text=True)
            check(r.returncode == 0, f"{where}: walctl has no command '{rest[0]}'")
        servers += [w.split("=", 1)[1] for w in globals_ if w.startswith("--server=")]
    check(bool(servers), f"{where}: walctl must be told --server")
    return servers


# ---- docker-compose.yml ----
compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
services = compose["services"]
check({"kafka", "walserver", "walctl-smoke"} <= set(services), "compose services")
check(services["kafka"]["image"].startswith("apache/kafka:"), "compose: official apache/kafka image")
ws = services["walserver"]
check(os.path.exists(os.path.join(ROOT, ws["build"]["dockerfile"])), "compose: Dockerfile path")
env = ws["environment"]
compose_options = {}
for key, value in env.items():
    check(key.startswith("WALSERVER_"), f"compose: {key} is not a WALSERVER_ variable")
    name = key[len("WALSERVER_"):].lower()
    check(name in OPTIONS, f"compose: {key} names no walserver option")
    compose_options[name] = str(value)
published = {int(p.split(":")[1]) for p in ws["ports"]}
check(port_of(compose_options["listen"]) in published, "compose: gRPC port published")
check(port_of(compose_options["http_listen"]) in published, "compose: HTTP port published")
kafka_listeners = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
check(compose_options["brokers"].split(":")[0] in kafka_listeners, "compose: brokers = kafka service")
smoke = services["walctl-smoke"]
for server in check_walctl(" ".join(smoke["command"]), "compose walctl-smoke"):
    check(server == f"walserver:{port_of(compose_options['listen'])}", f"compose: walctl --server={server}")
check(smoke["image"] == ws["image"], "compose: smoke job runs the walserver image")

# ---- the compose "monitoring" profile: Prometheus and Grafana with the dashboard ----
for name in ("prometheus", "grafana"):
    check(services.get(name, {}).get("profiles") == ["monitoring"],
          f"compose: {name} is in the monitoring profile only")


def volume_mounts(service):
    """{container path: repository path} of a service's bind mounts, each checked to exist."""
    mounts = {}
    for volume in services[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        check(os.path.exists(os.path.join(ROOT, source)), f"compose: {service} mounts missing {source}")
        mounts[target] = os.path.normpath(os.path.join(ROOT, source))
    return mounts


prometheus_config = yaml.safe_load(open(volume_mounts("prometheus")["/etc/prometheus/prometheus.yml"]))
targets = [t for job in prometheus_config["scrape_configs"] for c in job["static_configs"]
           for t in c["targets"]]
check(targets == [f"walserver:{port_of(compose_options['http_listen'])}"],
      f"prometheus scrapes walserver's --http_listen port: {targets}")
grafana_mounts = volume_mounts("grafana")
provisioning = grafana_mounts["/etc/grafana/provisioning"]
datasource = yaml.safe_load(open(os.path.join(provisioning, "datasources", "prometheus.yml")))
check(datasource["datasources"][0]["url"] == "http://prometheus:9090",
      "grafana: data source is the prometheus service")
check(any(p.endswith(":9090") for p in services["prometheus"]["ports"]), "prometheus: port 9090")
provider = yaml.safe_load(open(os.path.join(provisioning, "dashboards", "walserver.yml")))
dashboards_path = provider["providers"][0]["options"]["path"]
mounted_dashboards = {t: s for t, s in grafana_mounts.items() if t.startswith(dashboards_path + "/")}
check([os.path.relpath(s, ROOT) for s in mounted_dashboards.values()] ==
      [os.path.join("deploy", "grafana", "walserver.json")],
      f"grafana: the provider's folder {dashboards_path} holds deploy/grafana/walserver.json")
home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
check(home in mounted_dashboards, f"grafana: home dashboard {home} is mounted")
dashboard = json.load(open(os.path.join(ROOT, "deploy", "grafana", "walserver.json")))
check(dashboard["uid"] == "walserver" and len(dashboard["panels"]) >= 10, "dashboard: walserver")

# ---- deploy/Dockerfile ----
dockerfile = open(os.path.join(ROOT, "deploy", "Dockerfile")).read()
check("./scripts/setup.sh" in dockerfile, "Dockerfile builds with the CI set-up script")
check(re.search(r"^USER (?!root)\S+", dockerfile, re.M) is not None, "Dockerfile: non-root USER")
# The image runs the librdkafka setup.sh builds (scripts/librdkafka.sh), not a Debian package.
librdkafka_version = re.search(r"^librdkafka_version=(\S+)$",
                               open(os.path.join(ROOT, "scripts", "librdkafka.sh")).read(), re.M).group(1)
check(f"COPY --from=build /opt/walserver/librdkafka-{librdkafka_version}/lib/librdkafka.so.1 "
      "/usr/local/lib/" in dockerfile and "ENV WAL_CACHE=/opt/walserver" in dockerfile,
      f"Dockerfile copies the librdkafka {librdkafka_version} setup.sh built")
check("librdkafka1" not in dockerfile, "Dockerfile installs no Debian librdkafka")
copied = re.search(r"COPY --from=build (.*) (/usr/local/bin/)", dockerfile)
check(copied is not None, "Dockerfile copies the binaries")
for path in copied.group(1).split():
    check(path.endswith(("server/walserver", "client/walctl")), f"Dockerfile copies {path}")
entrypoint = yaml.safe_load(re.search(r"^ENTRYPOINT (.*)$", dockerfile, re.M).group(1))
check(entrypoint == ["/usr/local/bin/walserver"], "Dockerfile ENTRYPOINT is the copied walserver")
cmd = check_walserver_args(yaml.safe_load(re.search(r"^CMD (.*)$", dockerfile, re.M).group(1)), "Dockerfile CMD")
exposed = {int(p) for p in re.search(r"^EXPOSE (.*)$", dockerfile, re.M).group(1).split()}
check({port_of(cmd["listen"]), port_of(cmd["http_listen"])} <= exposed, "Dockerfile EXPOSE matches CMD")
health = re.search(r"HEALTHCHECK[^\n]*\n?\s*CMD (.*)", dockerfile).group(1)
check(f":{port_of(cmd['http_listen'])}/healthz" in health, "Dockerfile HEALTHCHECK on /healthz")

# ---- deploy/walserver.conf ----
check_config_text(open(os.path.join(ROOT, "deploy", "walserver.conf")).read(), "deploy/walserver.conf")

# ---- deploy/k8s ----
k8s_dir = os.path.join(ROOT, "deploy", "k8s")
docs = []
for name in sorted(os.listdir(k8s_dir)):
    if name.endswith((".yaml", ".yml")):
        docs += [d for d in yaml.safe_load_all(open(os.path.join(k8s_dir, name))) if d]
configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
pods = [d for d in docs if d["kind"] == "Pod"]
check(len(pods) == 1, "k8s: one Pod")
pod = pods[0]["spec"]
containers = {c["name"]: c for c in pod["containers"]}
check({"datanode", "walserver"} <= set(containers), "k8s: datanode and walserver containers")
volumes = {v["name"]: v for v in pod["volumes"]}
sidecar = containers["walserver"]
options = check_walserver_args(sidecar.get("args", []), "k8s walserver args")
config_mount = None
if "config" in options:
    for m in sidecar["volumeMounts"]:
        if options["config"].startswith(m["mountPath"] + "/"):
            config_mount = m
    check(config_mount is not None, "k8s: the config file is mounted")
    cm = configmaps[volumes[config_mount["name"]]["configMap"]["name"]]
    key = os.path.basename(options["config"])
    options.update(check_config_text(cm["data"][key], f"k8s ConfigMap {key}"))
listens = options["listen"].split(",")
sockets = [a[len("unix://"):] for a in listens if a.startswith("unix://")]
check(len(sockets) == 1, "k8s: walserver listens on a unix socket")
socket_dir = os.path.dirname(sockets[0])


def mount_of(container, path):
    for m in container["volumeMounts"]:
        if path == m["mountPath"]:
            return m["name"]
    return None


shared = mount_of(sidecar, socket_dir)
check(shared is not None and "emptyDir" in volumes[shared], "k8s: socket directory is an emptyDir")
check(mount_of(containers["datanode"], socket_dir) == shared, "k8s: datanode mounts the socket")
for server in check_walctl(" ".join(containers["datanode"]["args"]), "k8s datanode"):
    check(server == "unix://" + sockets[0], f"k8s: datanode uses the socket ({server})")
http_port = port_of(options["http_listen"])
for probe in ("readinessProbe", "livenessProbe"):
    get = sidecar[probe]["httpGet"]
    check(get["path"] == "/healthz" and get["port"] == http_port, f"k8s: {probe} on /healthz:{http_port}")
for c in pod["containers"]:
    check("limits" in c.get("resources", {}), f"k8s: {c['name']} has resource limits")

# ---- deploy/systemd ----
unit = open(os.path.join(ROOT, "deploy", "systemd", "walserver.service")).read()
exec_start = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.M).group(1))
check(os.path.basename(exec_start[0]) == "walserver", "systemd: ExecStart runs walserver")
unit_options = check_walserver_args(exec_start[1:], "systemd ExecStart")
check(re.search(r"^User=(?!root)", unit, re.M) is not None, "systemd: non-root User")
check("config" not in unit_options or os.path.basename(unit_options["config"]) == "walserver.conf",
      "systemd: uses deploy/walserver.conf")
# Its install steps put the librdkafka walserver was built with where the service user's loader
# finds it (the build's run path is in root's home).
check(f"~/.cache/walserver/librdkafka-{librdkafka_version}/lib/librdkafka.so.1 /usr/local/lib/"
      in unit and "ldconfig" in unit, "systemd: installs the librdkafka setup.sh built")

if failures:
    print("deploy_test: FAILED\n  " + "\n  ".join(failures))
    sys.exit(1)
print("deploy_test: all checks passed")
