"""The Kubernetes manifests (k8s/): every overlay renders with `kubectl kustomize`, validates
against the Kubernetes API schemas (kubernetes-validate, strict, offline), refers only to
objects, ports and labels that exist, and sets only configuration that the services read.

The reference checker (`dangling`) works on the rendered YAML, the way the API server and
kubelet would resolve names: generated ConfigMap/Secret names with their hash suffix, Service
selectors and ports, StatefulSet headless services, PVCs, probes, HPAs, PDBs, NetworkPolicies,
and host:port addresses inside configuration values.

The membership checker (`membership_problems`) does the same for run-time registration: every
compute worker and KV store pod, up to its HPA's maximum, registers with a scheduler Service
port (BIDAW_*_SCHEDULER) under its own stable name behind its own headless Service
(BIDAW_*_ADVERTISE, expanded from the downward API as kubelet expands it).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
# Current Kubernetes, and the oldest release that has everything used here (StatefulSet PVC
# retention policy went GA in 1.32).
K8S_VERSIONS = ("1.37.0", "1.32.0")
# Objects an overlay expects the operator to create (never in git); see docs/kubernetes.md.
EXTERNAL = {"gpu": {("Secret", "bidaw-api-keys"), ("Secret", "bidaw-ray-auth"),
                    ("Secret", "bidaw-cluster-token")}}

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet"}
ADDRESS_RE = re.compile(r"^(?:[a-z]+://)?([a-z0-9][a-z0-9.-]*):(\d+)(?:/.*)?$")

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    out = subprocess.run(["kubectl", "kustomize", str(K8S / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {overlay} failed:\n{out.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


# -- walking the rendered objects ----------------------------------------------------------------

def _ns(obj: dict) -> str:
    return obj["metadata"].get("namespace", "default")


def pod_spec(obj: dict) -> dict | None:
    if obj["kind"] in WORKLOADS:
        return obj["spec"]["template"]["spec"]
    return None


def pod_labels(obj: dict) -> dict:
    return obj["spec"]["template"]["metadata"].get("labels", {})


def containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec.get("containers", [])


def selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector (matchLabels/matchExpressions) or a plain map (Service selector)."""
    if selector is None:
        return False
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        present, value = expr["key"] in labels, labels.get(expr["key"])
        op = expr["operator"]
        if (op == "In" and value not in expr["values"]) or (op == "NotIn" and value in expr["values"]) \
                or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def selected_pods(docs, namespace: str, selector) -> list[dict]:
    return [o for o in docs if pod_spec(o) is not None and _ns(o) == namespace
            and selects(selector, pod_labels(o))]


def container_ports(workload: dict) -> dict[str | int, int]:
    """Port name -> number and number -> number, over the workload's containers."""
    ports: dict[str | int, int] = {}
    for c in containers(pod_spec(workload)):
        for p in c.get("ports", []):
            ports[p["containerPort"]] = p["containerPort"]
            if "name" in p:
                ports[p["name"]] = p["containerPort"]
    return ports


def env_of(container: dict, docs, namespace: str) -> dict[str, str]:
    """The environment a container starts with: envFrom ConfigMaps, then env values."""
    env: dict[str, str] = {}
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in docs if _ns(o) == namespace}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            cm = by_name.get(("ConfigMap", source["configMapRef"]["name"]))
            env.update((cm or {}).get("data", {}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env.setdefault(item["name"], "<from " + next(iter(item["valueFrom"])) + ">")
    return env


def pod_env(obj: dict, container: dict, docs, ordinal: int = 0) -> dict[str, str]:
    """The environment as kubelet hands it to pod number `ordinal` of `obj`: envFrom
    ConfigMaps, then `env` in order, the downward API's metadata.name/namespace filled in, and
    `$(VAR)` expanded from the variables defined before it (an unknown one stays as written)."""
    ns = _ns(obj)
    name = f"{obj['metadata']['name']}-{ordinal}" if obj["kind"] == "StatefulSet" \
        else f"{obj['metadata']['name']}-pod"
    env = env_of({**container, "env": []}, docs, ns)
    fields = {"metadata.name": name, "metadata.namespace": ns}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)),
                                       item["value"])
        elif "fieldRef" in item["valueFrom"] and item["valueFrom"]["fieldRef"]["fieldPath"] in fields:
            env[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[item["name"]] = "<from " + next(iter(item["valueFrom"])) + ">"
    return env


# -- the reference checker ----------------------------------------------------------------------

def dangling(docs, external: set[tuple[str, str]] = frozenset()) -> list[str]:
    """Every reference in `docs` that resolves to nothing, as readable sentences."""
    problems: list[str] = []
    index = {(o["kind"], _ns(o) if o["kind"] not in ("Namespace", "StorageClass") else "",
              o["metadata"]["name"]): o for o in docs}

    def exists(kind: str, ns: str, name: str) -> bool:
        return (kind, ns, name) in index or (kind, name) in external

    def keys_of(kind: str, ns: str, name: str) -> set[str] | None:
        obj = index.get((kind, ns, name))
        return None if obj is None else set(obj.get("data", {})) | set(obj.get("stringData", {}))

    namespaces = {o["metadata"]["name"] for o in docs if o["kind"] == "Namespace"}
    for obj in docs:
        what = f"{obj['kind']}/{obj['metadata']['name']}"
        ns = _ns(obj)
        if obj["kind"] not in ("Namespace", "StorageClass") and ns != "default" \
                and ns not in namespaces:
            problems.append(f"{what}: namespace {ns} is not part of the deployment")
        spec = pod_spec(obj)
        if spec is not None:
            problems += _pod_refs(what, obj, spec, ns, exists, keys_of)
        problems += _object_refs(what, obj, docs, ns, exists, index)
    problems += _address_refs(docs, index)
    return problems


def _pod_refs(what, obj, spec, ns, exists, keys_of) -> list[str]:
    problems = []
    if not selects(obj["spec"]["selector"], pod_labels(obj)):
        problems.append(f"{what}: selector does not match its own pod template")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
    if spec.get("serviceAccountName") and not exists("ServiceAccount", ns, spec["serviceAccountName"]):
        problems.append(f"{what}: ServiceAccount {spec['serviceAccountName']} does not exist")

    def need(kind: str, name: str, keys=(), optional=False) -> None:
        if optional:
            return
        if not exists(kind, ns, name):
            problems.append(f"{what}: {kind} {name} does not exist")
            return
        have = keys_of(kind, ns, name)
        for key in keys:
            if have is not None and key not in have:
                problems.append(f"{what}: {kind} {name} has no key {key}")

    for vol in volumes.values():
        if "configMap" in vol:
            need("ConfigMap", vol["configMap"]["name"], [i["key"] for i in vol["configMap"].get("items", [])],
                 vol["configMap"].get("optional", False))
        if "secret" in vol:
            need("Secret", vol["secret"]["secretName"], [i["key"] for i in vol["secret"].get("items", [])],
                 vol["secret"].get("optional", False))
        if "persistentVolumeClaim" in vol:
            need("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
    names = {c["name"] for c in containers(spec)}
    for c in containers(spec):
        where = f"{what} container {c['name']}"
        for source in c.get("envFrom", []):
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if key in source:
                    need(kind, source[key]["name"], optional=source[key].get("optional", False))
        for item in c.get("env", []):
            ref = item.get("valueFrom", {})
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in ref:
                    need(kind, ref[key]["name"], [ref[key]["key"]], ref[key].get("optional", False))
            if "resourceFieldRef" in ref and ref["resourceFieldRef"].get("containerName", c["name"]) not in names:
                problems.append(f"{where}: env {item['name']} refers to no container")
        for mount in c.get("volumeMounts", []):
            if mount["name"] not in volumes and mount["name"] not in claims:
                problems.append(f"{where}: mounts volume {mount['name']}, which is not declared")
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(probe_name) or {}
            for handler in ("httpGet", "tcpSocket", "grpc"):
                if handler in probe:
                    port = probe[handler]["port"]
                    if port not in ports and port not in ports.values():
                        problems.append(f"{where}: {probe_name} port {port} is not a container port")
    return problems


def _object_refs(what, obj, docs, ns, exists, index) -> list[str]:
    problems = []
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind == "Service":
        pods = selected_pods(docs, ns, spec.get("selector"))
        if not pods:
            problems.append(f"{what}: selector {spec.get('selector')} matches no pod")
        for port in spec.get("ports", []):
            target = port.get("targetPort", port["port"])
            if pods and not any(target in container_ports(p) for p in pods):
                problems.append(f"{what}: targetPort {target} is not a port of the selected pods")
    elif kind == "StatefulSet":
        svc = index.get(("Service", ns, spec["serviceName"]))
        if svc is None:
            problems.append(f"{what}: serviceName {spec['serviceName']} is not a Service")
        elif svc["spec"].get("clusterIP") != "None":
            problems.append(f"{what}: Service {spec['serviceName']} must be headless for pod DNS names")
        for claim in spec.get("volumeClaimTemplates", []):
            problems += _storage_class(what, claim["spec"], index)
    elif kind == "PersistentVolumeClaim":
        problems += _storage_class(what, spec, index)
    elif kind == "PodDisruptionBudget":
        if not selected_pods(docs, ns, spec["selector"]):
            problems.append(f"{what}: selector matches no pod")
    elif kind == "HorizontalPodAutoscaler":
        ref = spec["scaleTargetRef"]
        if not exists(ref["kind"], ns, ref["name"]):
            problems.append(f"{what}: scale target {ref['kind']}/{ref['name']} does not exist")
    elif kind == "NetworkPolicy":
        selector = spec["podSelector"]
        if selector and not selected_pods(docs, ns, selector):
            problems.append(f"{what}: podSelector matches no pod")
        for rule in spec.get("ingress", []) + spec.get("egress", []):
            for peer in rule.get("from", []) + rule.get("to", []):
                if "podSelector" in peer and "namespaceSelector" not in peer and peer["podSelector"] \
                        and not selected_pods(docs, ns, peer["podSelector"]):
                    problems.append(f"{what}: peer podSelector {peer['podSelector']} matches no pod")
    return problems


def _storage_class(what, claim_spec, index) -> list[str]:
    name = claim_spec.get("storageClassName")
    if name and ("StorageClass", "", name) not in index:
        return [f"{what}: StorageClass {name} is not part of the deployment"]
    return []


def _address_refs(docs, index) -> list[str]:
    """host:port values in configuration (`scheduler:50052`, `kv-store-0.kv-store:50051`,
    `redis://redis:6379/0`) must name a Service (or a StatefulSet pod behind its headless
    Service) that exposes that port."""
    problems = []
    for obj in docs:
        if obj["kind"] != "ConfigMap":
            continue
        ns = _ns(obj)
        for key, value in obj.get("data", {}).items():
            for item in str(value).split(","):
                match = ADDRESS_RE.match(item.strip())
                if not match or "$(" in item:
                    continue
                host, port = match.group(1), int(match.group(2))
                if host in ("localhost", "0.0.0.0") or re.fullmatch(r"[\d.]+", host):
                    continue
                problem = _resolve(host, port, ns, index)
                if problem:
                    problems.append(f"ConfigMap/{obj['metadata']['name']} {key}={item}: {problem}")
    return problems


def dns_parts(host: str, ns: str) -> tuple[list[str], str | None]:
    """`service` or `pod.service`, from a name as a pod of namespace `ns` resolves it:
    `service`, `service.ns`, `service.ns.svc[.cluster.local]`, and the same behind `pod.`."""
    parts = host.split(".")
    for suffix in (["svc", "cluster", "local"], ["svc"]):
        if len(parts) > len(suffix) + 1 and parts[-len(suffix):] == suffix:
            if parts[-len(suffix) - 1] != ns:
                return [], f"namespace {parts[-len(suffix) - 1]} is not the deployment's ({ns})"
            return parts[:-len(suffix) - 1], (None if len(parts) - len(suffix) - 1 <= 2
                                              else f"{host} is not service or pod.service")
    if len(parts) > 1 and parts[-1] == ns:  # service.ns, pod.service.ns
        parts = parts[:-1]
    if len(parts) > 2:
        return [], f"{host} is not service or pod.service in namespace {ns}"
    return parts, None


def _resolve(host: str, port: int, ns: str, index) -> str | None:
    parts, problem = dns_parts(host, ns)
    if problem:
        return problem
    if len(parts) == 1:
        svc = index.get(("Service", ns, parts[0]))
        if svc is None:
            return f"no Service {parts[0]}"
    else:  # pod.service: a StatefulSet pod
        pod, service = parts[0], parts[1]
        svc = index.get(("Service", ns, service))
        if svc is None:
            return f"no Service {service}"
        sets = [o for o in index.values() if o["kind"] == "StatefulSet" and _ns(o) == ns
                and o["spec"]["serviceName"] == service]
        ordinals = {f"{s['metadata']['name']}-{i}" for s in sets for i in range(s["spec"].get("replicas", 1))}
        if pod not in ordinals:
            return f"no StatefulSet pod {pod} behind Service {service} (pods: {sorted(ordinals)})"
    if port not in {p["port"] for p in svc["spec"].get("ports", [])}:
        return f"Service {svc['metadata']['name']} has no port {port}"
    return None


# -- rendering and schemas ------------------------------------------------------------------------

@needs_kubectl
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates_strictly(overlay, version):
    import kubernetes_validate

    docs = render(overlay)
    assert docs, f"{overlay} renders nothing"
    failures = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
            failures.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc}")
    assert not failures, "\n".join(failures)


def test_both_required_overlays_exist():
    assert {"dev-cpu", "gpu"} <= set(OVERLAYS)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_resolves(overlay):
    problems = dangling(render(overlay), EXTERNAL.get(overlay, set()))
    assert not problems, "\n".join(problems)


# -- the checker itself catches what it claims to catch --------------------------------------------

def _find(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name))


@needs_kubectl
@pytest.mark.parametrize("breakage, expected", [
    (lambda d: _find(d, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0]
     ["envFrom"][0]["configMapRef"].update(name="bidaw-gateway"), "ConfigMap bidaw-gateway does not exist"),
    (lambda d: _find(d, "Deployment", "gateway")["spec"]["template"]["spec"]["volumes"][0]
     ["secret"].update(secretName="bidaw-api-keys"), "Secret bidaw-api-keys does not exist"),
    (lambda d: _find(d, "Service", "scheduler")["spec"]["ports"][0].update(targetPort="grpcx"),
     "targetPort grpcx"),
    (lambda d: _find(d, "Service", "kv-store")["spec"].update(selector={"app.kubernetes.io/component": "kvstore"}),
     "matches no pod"),
    (lambda d: _find(d, "PodDisruptionBudget", "compute")["spec"]["selector"]["matchLabels"].update(
        {"app.kubernetes.io/component": "workers"}), "matches no pod"),
    (lambda d: _find(d, "NetworkPolicy", "kv-store")["spec"]["ingress"][0]["from"][0]["podSelector"]
     ["matchLabels"].update({"app.kubernetes.io/component": "sched"}), "peer podSelector"),
    (lambda d: _find(d, "StatefulSet", "kv-store")["spec"]["template"]["spec"]["volumes"].append(
        {"name": "extra", "persistentVolumeClaim": {"claimName": "models"}}),
     "PersistentVolumeClaim models does not exist"),
    (lambda d: _find(d, "StatefulSet", "kv-store")["spec"]["volumeClaimTemplates"][0]["spec"].update(
        storageClassName="fast"), "StorageClass fast"),
    (lambda d: _find(d, "ConfigMap", "bidaw-scheduler")["data"].update(
        BIDAW_SCHEDULER_WORKERS="compute-0.compute:50053,compute-7.compute:50053"), "no StatefulSet pod compute-7"),
    (lambda d: _find(d, "ConfigMap", "bidaw-gateway")["data"].update(BIDAW_GATEWAY_SCHEDULER="scheduler:5005"),
     "has no port 5005"),
    (lambda d: _find(d, "ConfigMap", "bidaw-otel")["data"].update(OTEL_EXPORTER_OTLP_ENDPOINT="http://jaegr:4317"),
     "no Service jaegr"),
    (lambda d: _find(d, "HorizontalPodAutoscaler", "compute")["spec"]["scaleTargetRef"].update(name="workers"),
     "scale target StatefulSet/workers"),
    (lambda d: _find(d, "StatefulSet", "compute")["spec"]["template"]["spec"]["containers"][0]
     ["readinessProbe"]["grpc"].update(port=50099), "readinessProbe port 50099"),
])
def test_reference_checker_catches(breakage, expected):
    docs = copy.deepcopy(list(render("dev-cpu")))
    assert not dangling(docs)
    breakage(docs)
    problems = dangling(docs)
    assert any(expected in p for p in problems), problems


# -- configuration reaches real config fields -------------------------------------------------------

def _services():
    from services.cli.serve import SERVICES

    return {svc.env_prefix: (name, svc.config) for name, svc in SERVICES.items()}


def bidaw_command(container: dict) -> list[str] | None:
    """The `bidaw ...` arguments a container runs (tini -- bidaw ARGS, or a shell line)."""
    command, args = container.get("command"), container.get("args", [])
    if command is None:  # the image's entry point: tini -- bidaw
        return list(args)
    script = " ".join(command + args)
    match = re.search(r"(?:^|\s|exec\s)bidaw\s+([^\n;&|]*)", script)
    return match.group(1).split() if match else None


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_is_a_config_field(overlay, monkeypatch):
    """Every BIDAW_<SERVICE>_<FIELD> a container gets, and every --flag it is given, exists in
    that service's config dataclass, belongs to the service the container runs, and converts
    (sizes, numbers) the way the service will convert it."""
    from services.cli.main import build_parser
    from services.runtime.config import load_config

    services = _services()
    docs = render(overlay)
    problems = []
    for obj in docs:
        spec = pod_spec(obj)
        if spec is None:
            continue
        for c in containers(spec):
            where = f"{obj['metadata']['name']}/{c['name']}"
            if not c["image"].split("/")[-1].startswith("bidaw"):
                continue  # Redis, Jaeger
            argv = bidaw_command(c)
            if argv is None:  # a Bidaw image running something else (the Ray head)
                continue
            args = build_parser().parse_args(argv)  # unknown flags exit here
            env = env_of(c, docs, _ns(obj))
            for name in env:
                if name.startswith("BIDAW_") and not any(name.startswith(p) for p in services) \
                        and not name.startswith("BIDAW_LOG_"):
                    problems.append(f"{where}: {name} belongs to no service")
            if args.command != "serve":
                continue
            prefix = next(p for p, (svc, _) in services.items() if svc == args.service)
            cls = services[prefix][1]
            fields = {f.name for f in dataclasses.fields(cls)}
            for name in env:
                if not name.startswith(prefix):
                    if name.startswith("BIDAW_") and not name.startswith("BIDAW_LOG_"):
                        problems.append(f"{where} runs `{args.service}` but gets {name}")
                    continue
                field = name[len(prefix):].lower()
                if field not in fields:
                    problems.append(f"{where}: {name}: {cls.__name__} has no field {field!r}")
            for name, value in pod_env(obj, c, docs).items():  # as kubelet expands it
                monkeypatch.setenv(name, value if not value.startswith("<from") else "1")
            try:
                load_config(cls, args, env_prefix=prefix)
            except (ValueError, TypeError) as exc:
                problems.append(f"{where}: configuration does not load: {exc}")
            for name in env:
                monkeypatch.delenv(name, raising=False)
    assert not problems, "\n".join(problems)


# -- values that must agree with each other --------------------------------------------------------

def _by(docs, kind, name):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _config(docs, prefix: str) -> dict[str, str]:
    return next(d["data"] for d in docs if d["kind"] == "ConfigMap"
                and any(k.startswith(prefix) for k in d.get("data", {})))


def _quantity(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12, "": 1}
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", str(text)).groups()
    return int(float(number) * units[unit])


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_capacities_fit_their_volumes_and_limits(overlay):
    from services.runtime.config import parse_size

    docs = render(overlay)
    store = _config(docs, "BIDAW_STORE_")
    dram, ssd = parse_size(store["BIDAW_STORE_DRAM_BYTES"]), parse_size(store["BIDAW_STORE_SSD_BYTES"])
    sts = _by(docs, "StatefulSet", "kv-store")
    spec = sts["spec"]["template"]["spec"]
    limit = _quantity(spec["containers"][0]["resources"]["limits"]["memory"])
    assert dram < limit, "the DRAM tier must fit under the store's memory limit"
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    if "emptyDir" in volume:
        assert volume["emptyDir"].get("medium") == "Memory", "the DRAM tier is a tmpfs"
        assert dram <= _quantity(volume["emptyDir"]["sizeLimit"]) <= limit
    else:
        assert volume["hostPath"]["path"] == "/dev/shm"
    data_dir = store["BIDAW_STORE_DATA_DIR"]
    ssd_mount = next(m for m in spec["containers"][0]["volumeMounts"]
                     if data_dir.startswith(m["mountPath"].rstrip("/") + "/"))
    claim = next(t for t in sts["spec"]["volumeClaimTemplates"] if t["metadata"]["name"] == ssd_mount["name"])
    assert ssd <= _quantity(claim["spec"]["resources"]["requests"]["storage"]), \
        "the SSD tier must fit on its PersistentVolume"


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_compute_and_storage_autoscale_within_bounds(overlay):
    """Workers and shards register themselves, so the replica count is the only knob: each
    StatefulSet has an HPA of its own, and the replicas an overlay sets sit within its bounds."""
    docs = render(overlay)
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    for hpa in hpas:
        target = _by(docs, hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"])
        assert hpa["spec"]["minReplicas"] <= target["spec"]["replicas"] <= hpa["spec"]["maxReplicas"], \
            hpa["metadata"]["name"]
    scaled = {(h["spec"]["scaleTargetRef"]["kind"], h["spec"]["scaleTargetRef"]["name"]) for h in hpas}
    assert {("StatefulSet", "compute"), ("StatefulSet", "kv-store")} <= scaled


# -- run-time membership: workers and shards register with the scheduler ---------------------------

MEMBERS = {"worker": "BIDAW_WORKER_", "store": "BIDAW_STORE_"}  # `bidaw serve X` -> env prefix


def _served(docs, service: str) -> list[tuple[dict, dict]]:
    """(workload, container) pairs running `bidaw serve <service>`."""
    found = []
    for obj in docs:
        spec = pod_spec(obj)
        for c in containers(spec) if spec is not None else []:
            argv = bidaw_command(c)
            if argv and argv[:2] == ["serve", service]:
                found.append((obj, c))
    return found


def _pods_possible(docs, obj: dict) -> int:
    """How many pods the workload may have: its replicas, or its HPA's maximum."""
    counts = [obj["spec"].get("replicas", 1)]
    counts += [h["spec"]["maxReplicas"] for h in docs if h["kind"] == "HorizontalPodAutoscaler"
               and h["spec"]["scaleTargetRef"]["name"] == obj["metadata"]["name"]
               and h["spec"]["scaleTargetRef"]["kind"] == obj["kind"]]
    return max(counts)


def _listen_port(env: dict[str, str], prefix: str) -> int:
    return int(env.get(f"{prefix}LISTEN", "").rsplit(":", 1)[-1] or -1)


def _service_port_to(svc: dict, workload: dict, port: int) -> bool:
    """Does `svc` expose `port` and send it to the workload's container port of that number?"""
    ports = container_ports(workload)
    return any(p["port"] == port and ports.get(p.get("targetPort", p["port"])) == port
               for p in svc["spec"].get("ports", []))


def membership_problems(docs) -> list[str]:
    """Every compute worker and KV store pod registers with an existing scheduler Service port
    that leads to the scheduler's listen port (BIDAW_*_SCHEDULER), under its own stable name:
    `<pod>.<its headless Service>[.<namespace>.svc]:<its listen port>` (BIDAW_*_ADVERTISE),
    checked for every pod the StatefulSet may have (up to its HPA's maximum). Workers keep a
    fallback shard (BIDAW_WORKER_STORE), without which they would never use a store."""
    problems: list[str] = []
    index = {(o["kind"], _ns(o), o["metadata"]["name"]): o for o in docs}
    schedulers = _served(docs, "scheduler")
    if not schedulers:
        return ["no workload runs `bidaw serve scheduler`"]
    for service, prefix in MEMBERS.items():
        members = _served(docs, service)
        if not members:
            problems.append(f"no workload runs `bidaw serve {service}`")
        for obj, c in members:
            ns, name = _ns(obj), obj["metadata"]["name"]
            if obj["kind"] != "StatefulSet":
                problems.append(f"{obj['kind']}/{name}: a {service} needs a stable name (StatefulSet)")
                continue
            for ordinal in range(_pods_possible(docs, obj)):
                pod = f"{name}-{ordinal}"
                env = pod_env(obj, c, docs, ordinal)
                listen = _listen_port(env, prefix)
                problems += [f"{pod}: {p}" for p in
                             _scheduler_problems(env.get(f"{prefix}SCHEDULER", ""), prefix, ns, index,
                                                 docs, schedulers)]
                problems += [f"{pod}: {p}" for p in
                             _advertise_problems(env.get(f"{prefix}ADVERTISE", ""), prefix, pod, obj,
                                                 listen, index)]
                if service == "worker" and not env.get("BIDAW_WORKER_STORE"):
                    problems.append(f"{pod}: BIDAW_WORKER_STORE is empty: no fallback store, and "
                                    "with none the worker recomputes every prompt")
    return problems


def _scheduler_problems(value: str, prefix: str, ns: str, index, docs, schedulers) -> list[str]:
    items = [t.strip() for t in value.split(",") if t.strip()]
    if not items:
        return [f"no {prefix}SCHEDULER: it never registers"]
    problems = []
    for item in items:
        match = ADDRESS_RE.match(item)
        if not match or "$(" in item:
            problems.append(f"{prefix}SCHEDULER={item} is not host:port")
            continue
        host, port = match.group(1), int(match.group(2))
        problem = _resolve(host, port, ns, index)
        if problem:
            problems.append(f"{prefix}SCHEDULER={item}: {problem}")
            continue
        svc = index[("Service", ns, dns_parts(host, ns)[0][-1])]
        if not any(_ns(o) == ns and selects(svc["spec"].get("selector"), pod_labels(o))
                   and _listen_port(pod_env(o, c, docs), "BIDAW_SCHEDULER_") == port
                   and _service_port_to(svc, o, port) for o, c in schedulers):
            problems.append(f"{prefix}SCHEDULER={item}: Service {svc['metadata']['name']} port {port} "
                            "does not lead to a scheduler listening on it")
    return problems


def _advertise_problems(value: str, prefix: str, pod: str, obj: dict, listen: int, index) -> list[str]:
    ns, governing = _ns(obj), obj["spec"]["serviceName"]
    match = ADDRESS_RE.match(value)
    if not value:
        return [f"no {prefix}ADVERTISE: it would register 127.0.0.1:{listen}, which only it can dial"]
    if not match or "$(" in value:
        return [f"{prefix}ADVERTISE={value} is not host:port (an unset variable?)"]
    host, port = match.group(1), int(match.group(2))
    parts, problem = dns_parts(host, ns)
    if problem:
        return [f"{prefix}ADVERTISE={value}: {problem}"]
    if len(parts) != 2 or parts[0] != pod:
        return [f"{prefix}ADVERTISE={value} does not name this pod ({pod}.{governing}): "
                "use $(POD_NAME) from the downward API"]
    if parts[1] != governing:
        return [f"{prefix}ADVERTISE={value} is not behind its own headless Service {governing}"]
    svc = index.get(("Service", ns, governing))
    problems = []
    if svc is None or svc["spec"].get("clusterIP") != "None" \
            or not selects(svc["spec"].get("selector"), pod_labels(obj)):
        problems.append(f"{prefix}ADVERTISE={value}: Service {governing} is not a headless Service "
                        "selecting this pod")
    if port != listen:
        problems.append(f"{prefix}ADVERTISE={value}: the pod listens on {listen} ({prefix}LISTEN)")
    elif svc is not None and not _service_port_to(svc, obj, port):
        problems.append(f"{prefix}ADVERTISE={value}: Service {governing} has no port {port} "
                        "to that container port")
    return problems


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_members_register_with_the_scheduler_under_their_own_names(overlay):
    problems = membership_problems(render(overlay))
    assert not problems, "\n".join(problems)


def _set_env(docs, workload: str, name: str, value: str | None) -> None:
    """Set (or, with None, remove) an `env` item of the workload's first container."""
    env = _find(docs, "StatefulSet", workload)["spec"]["template"]["spec"]["containers"][0]["env"]
    env[:] = [e for e in env if e["name"] != name] + ([{"name": name, "value": value}] if value else [])


@needs_kubectl
@pytest.mark.parametrize("breakage, expected", [
    (lambda d: _set_env(d, "compute", "BIDAW_WORKER_ADVERTISE", "$(POD_NAME).kv-store.$(POD_NAMESPACE).svc:50053"),
     "not behind its own headless Service compute"),
    (lambda d: _set_env(d, "kv-store", "BIDAW_STORE_ADVERTISE", "kv-store-0.kv-store.$(POD_NAMESPACE).svc:50051"),
     "does not name this pod (kv-store-1.kv-store)"),
    (lambda d: _set_env(d, "kv-store", "BIDAW_STORE_ADVERTISE", "$(POD_NAME).kv-store.other.svc:50051"),
     "namespace other"),
    (lambda d: _set_env(d, "compute", "BIDAW_WORKER_ADVERTISE", "$(POD_NAME).compute.$(POD_NAMESPACE).svc:50099"),
     "listens on 50053"),
    (lambda d: _set_env(d, "compute", "BIDAW_WORKER_ADVERTISE", "$(POD).compute:50053"),
     "an unset variable"),
    (lambda d: _set_env(d, "kv-store", "BIDAW_STORE_ADVERTISE", None), "no BIDAW_STORE_ADVERTISE"),
    (lambda d: _set_env(d, "kv-store", "BIDAW_STORE_SCHEDULER", None), "no BIDAW_STORE_SCHEDULER"),
    (lambda d: _set_env(d, "compute", "BIDAW_WORKER_SCHEDULER", "scheduler.$(POD_NAMESPACE).svc:5005"),
     "has no port 5005"),
    (lambda d: _set_env(d, "compute", "BIDAW_WORKER_SCHEDULER", "gateway:8000"),
     "does not lead to a scheduler"),
    (lambda d: _find(d, "Service", "kv-store")["spec"].pop("clusterIP"), "not a headless Service"),
    (lambda d: _find(d, "ConfigMap", "bidaw-worker")["data"].update(BIDAW_WORKER_STORE=""),
     "no fallback store"),
])
def test_membership_checker_catches(breakage, expected):
    docs = copy.deepcopy(list(render("dev-cpu")))
    assert not membership_problems(docs)
    breakage(docs)
    problems = membership_problems(docs)
    assert any(expected in p for p in problems), problems


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduler_starts_with_no_static_members(overlay, monkeypatch, tmp_path):
    """Every member registers, so the scheduler's own lists are empty, and it starts and serves
    that way (gRPC health SERVING, no workers, no shards) until the first member registers."""
    from services.runtime.config import load_config
    from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
    from services.runtime.grpc_util import channel, wait_healthy
    from scheduler.config import SchedulerConfig
    from scheduler.main import start

    docs = render(overlay)
    (obj, c), = _served(docs, "scheduler")
    env = {k: v for k, v in pod_env(obj, c, docs).items() if k.startswith("BIDAW_SCHEDULER_")}
    assert env.get("BIDAW_SCHEDULER_WORKERS") == "" and env.get("BIDAW_SCHEDULER_STORE") == "", \
        "workers and shards register themselves: no static lists"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("BIDAW_SCHEDULER_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("BIDAW_SCHEDULER_METRICS_LISTEN", "")
    # the Secret's file, as mounted in the pod, here in a temporary directory
    assert env["BIDAW_SCHEDULER_CLUSTER_TOKEN_FILE"] == "/etc/bidaw/cluster/token"
    (tmp_path / "token").write_text("k8s-test-token\n")
    monkeypatch.setenv("BIDAW_SCHEDULER_CLUSTER_TOKEN_FILE", str(tmp_path / "token"))
    config = load_config(SchedulerConfig, None, env_prefix="BIDAW_SCHEDULER_")
    assert config.workers == [] and config.store == "" and config.heartbeat_s > 0
    server, service = start(config)
    try:
        target = f"127.0.0.1:{server.port}"
        wait_healthy(target, timeout=20, service="bidaw.v1.Scheduler")
        stats = scheduler_pb2_grpc.SchedulerStub(channel(target, token="k8s-test-token")).Stats(
            scheduler_pb2.SchedulerStatsRequest(), timeout=5)
        assert (stats.workers, stats.stores) == (0, 0)
    finally:
        server.stop(0)
        service.stop()


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_policies_are_known(overlay):
    from kv_store.eviction.registry import NEEDS_FUTURE, POLICY_NAMES
    from scheduler.policy import QUEUE_POLICIES

    docs = render(overlay)
    eviction = _config(docs, "BIDAW_STORE_")["BIDAW_STORE_EVICTION"]
    assert eviction in POLICY_NAMES and eviction not in NEEDS_FUTURE
    assert _config(docs, "BIDAW_SCHEDULER_")["BIDAW_SCHEDULER_POLICY"] in QUEUE_POLICIES


# -- what every pod must have ---------------------------------------------------------------------

@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_resources_and_non_root(overlay):
    docs = render(overlay)
    problems = []
    for obj in docs:
        spec = pod_spec(obj)
        if spec is None:
            continue
        pod_sc = spec.get("securityContext", {})
        for c in spec["containers"]:
            where = f"{obj['metadata']['name']}/{c['name']}"
            for probe in ("readinessProbe", "livenessProbe"):
                if probe not in c:
                    problems.append(f"{where}: no {probe}")
            for kind in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if resource not in c.get("resources", {}).get(kind, {}):
                        problems.append(f"{where}: no {resource} {kind}")
            sc = c.get("securityContext", {})
            if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) and
                    sc.get("runAsUser", pod_sc.get("runAsUser", 0)) != 0):
                problems.append(f"{where}: may run as root")
            if sc.get("allowPrivilegeEscalation") is not False or sc.get("capabilities", {}).get("drop") != ["ALL"]:
                problems.append(f"{where}: privilege escalation or capabilities left open")
            argv = bidaw_command(c)
            if argv and argv[:1] == ["serve"]:
                grpc_service = {"store": "bidaw.v1.KVStore", "scheduler": "bidaw.v1.Scheduler",
                                "worker": "bidaw.v1.ComputeWorker"}.get(argv[1])
                if grpc_service:  # gRPC services are probed through gRPC health
                    assert c["readinessProbe"].get("grpc", {}).get("service") == grpc_service, where
                    assert "grpc" in c["livenessProbe"], where
                else:  # the gateway over HTTP
                    assert c["readinessProbe"]["httpGet"]["path"] == "/health", where
    assert not problems, "\n".join(problems)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_bidaw_workloads_have_disruption_budgets(overlay):
    docs = render(overlay)
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for name in ("gateway", "scheduler", "compute", "kv-store"):
        labels = pod_labels(next(d for d in docs if d["kind"] in WORKLOADS and d["metadata"]["name"] == name))
        assert any(selects(p["spec"]["selector"], labels) for p in pdbs), name


def ingress_allowed(docs, target: str, port: int) -> set[str]:
    """Evaluate the NetworkPolicies: the components (or "outside", "anyone") that may open
    `port` on the pods of component `target`."""
    components = {pod_labels(d).get("app.kubernetes.io/component"): d for d in docs if d["kind"] in WORKLOADS}
    labels = pod_labels(components[target])
    policies = [p for p in docs if p["kind"] == "NetworkPolicy"
                and "Ingress" in p["spec"]["policyTypes"]
                and (p["spec"]["podSelector"] == {} or selects(p["spec"]["podSelector"], labels))]
    assert policies, f"no policy isolates {target}"
    who: set[str] = set()
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = {p["port"] for p in rule.get("ports", [])}
            if ports and port not in ports:
                continue
            if "from" not in rule:
                return {"anyone"}
            for peer in rule["from"]:
                if "namespaceSelector" in peer or "ipBlock" in peer:
                    who.add("outside")
                    continue
                who |= {name for name, d in components.items() if selects(peer["podSelector"], pod_labels(d))
                        or peer["podSelector"] == {}}
    return who


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_scheduler_and_workers_reach_the_kv_store(overlay):
    """Who may open the KV store's gRPC port, Redis's, a worker's and the scheduler's."""
    docs = render(overlay)
    assert ingress_allowed(docs, "kv-store", 50051) == {"scheduler", "compute"}
    assert ingress_allowed(docs, "redis", 6379) == {"kv-store"}
    # Ray nodes talk to each other on every port (Ray picks most of them at run time).
    assert "scheduler" in ingress_allowed(docs, "compute", 50053) <= {"scheduler", "compute", "ray-head"}
    # Turns from the gateway; registration and heartbeats from workers and shards.
    assert ingress_allowed(docs, "scheduler", 50052) == {"gateway", "compute", "kv-store"}


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_members_and_scheduler_reach_each_other(overlay):
    """Each member may open the scheduler port it registers on (BIDAW_*_SCHEDULER), and the
    scheduler may open the port each member advertises (BIDAW_*_ADVERTISE)."""
    docs = render(overlay)
    for service, prefix in MEMBERS.items():
        for obj, c in _served(docs, service):
            component = pod_labels(obj)["app.kubernetes.io/component"]
            env = pod_env(obj, c, docs)
            for item in env[f"{prefix}SCHEDULER"].split(","):
                port = int(item.rsplit(":", 1)[1])
                assert component in ingress_allowed(docs, "scheduler", port), (component, item)
            port = int(env[f"{prefix}ADVERTISE"].rsplit(":", 1)[1])
            assert "scheduler" in ingress_allowed(docs, component, port), (component, port)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_metrics_are_scraped_where_they_are_served(overlay):
    docs = render(overlay)
    for obj in docs:
        spec = pod_spec(obj)
        if spec is None or not obj["metadata"]["name"] in ("gateway", "scheduler", "compute", "kv-store"):
            continue
        notes = obj["spec"]["template"]["metadata"].get("annotations", {})
        assert notes.get("prometheus.io/scrape") == "true", obj["metadata"]["name"]
        port = int(notes["prometheus.io/port"])
        assert port in container_ports(obj).values()
        env = env_of(spec["containers"][0], docs, _ns(obj))
        listen = next((v for k, v in env.items() if k.endswith("_METRICS_LISTEN")), None) \
            or next(v for k, v in env.items() if k == "BIDAW_GATEWAY_LISTEN")
        assert listen.endswith(f":{port}"), obj["metadata"]["name"]


@needs_kubectl
def test_gpu_overlay_puts_workers_on_gpus_and_stores_beside_them():
    docs = render("gpu")
    compute = _by(docs, "StatefulSet", "compute")["spec"]["template"]["spec"]
    assert compute["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    store = _by(docs, "StatefulSet", "kv-store")
    assert store["spec"]["template"]["spec"]["nodeSelector"] == compute["nodeSelector"]
    anti = store["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert store["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local-nvme"
    hpa = _by(docs, "HorizontalPodAutoscaler", "compute")
    assert hpa["spec"]["metrics"][0]["type"] == "External"
    images = {c["image"] for d in docs if pod_spec(d) for c in pod_spec(d)["containers"]
              if d["metadata"]["name"] in ("compute", "ray-head")}
    assert all(i.endswith("-cuda") for i in images), images


# -- the dashboard asks for metrics that exist -------------------------------------------------------

def test_grafana_dashboard_uses_real_metrics():
    from prometheus_client.metrics import MetricWrapperBase

    import services.runtime.metrics as m

    exposed = set()
    for obj in vars(m).values():
        if isinstance(obj, MetricWrapperBase):
            name, kind = obj._name, obj._type
            exposed |= {"counter": {f"{name}_total"}, "gauge": {name},
                        "histogram": {f"{name}_bucket", f"{name}_sum", f"{name}_count"}}.get(kind, {name})
    dashboard = json.loads((K8S / "base" / "grafana" / "bidaw.json").read_text())
    used = {name for panel in dashboard["panels"] for t in panel.get("targets", [])
            for name in re.findall(r"\b(bidaw_[a-z0-9_]+)", t["expr"])}
    assert used and used <= exposed, f"not in services/runtime/metrics.py: {sorted(used - exposed)}"
    for topic in ("bidaw_scheduler_queue_length", "bidaw_kv_tier_bytes", "bidaw_kv_lookups_total",
                  "bidaw_kv_promotion_bytes_total", "bidaw_ttft_seconds_bucket", "bidaw_tokens_total"):
        assert topic in used, topic
