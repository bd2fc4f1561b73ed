"""The optional Kustomize components (k8s/components/tls) on top of each overlay:
they render, validate strictly, reference only what exists (plus the Secrets the operator
creates), give each service only its own config fields, and leave no plaintext gRPC probe."""
from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest
import yaml

from tests.test_k8s_manifests import (EXTERNAL, K8S, K8S_VERSIONS, OVERLAYS, _services,
                                      bidaw_command, containers, dangling, env_of, needs_kubectl,
                                      pod_spec)

COMPONENTS = ["tls"]  # the cluster token is in the base now: every service, every overlay
SECRETS = {("Secret", "bidaw-tls"), ("Secret", "bidaw-cluster-token")}


def render_with(tmp_path, overlay: str) -> tuple[dict, ...]:
    """`overlay` plus both components, as an operator's own kustomization would add them."""
    rel = lambda p: os.path.relpath(p, tmp_path)  # noqa: E731 - kustomize wants relative paths
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(K8S / "overlays" / overlay)],
        "components": [rel(K8S / "components" / c) for c in COMPONENTS]}))
    out = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_components_render_validate_and_resolve(overlay, tmp_path):
    import kubernetes_validate

    docs = render_with(tmp_path, overlay)
    for doc in docs:
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    assert not dangling(docs, EXTERNAL.get(overlay, set()) | SECRETS)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_grpc_hop_gets_tls_and_probes_speak_it(overlay, tmp_path):
    from services.cli.main import build_parser

    services = _services()
    docs = render_with(tmp_path, overlay)
    seen = set()
    for obj in docs:
        spec = pod_spec(obj)
        for c in containers(spec) if spec else []:
            argv = bidaw_command(c)
            if not argv or argv[0] != "serve":
                continue
            service = argv[1]
            prefix = next(p for p, (name, _) in services.items() if name == service)
            fields = {f.name for f in dataclasses.fields(services[prefix][1])}
            env = env_of(c, docs, obj["metadata"]["namespace"])
            for field in ("tls_cert", "tls_key", "tls_ca"):
                assert field in fields and env[f"{prefix}{field.upper()}"].startswith(
                    "/etc/bidaw/tls/"), (service, field)
            # every service, the gateway too, carries the cluster token
            assert env[f"{prefix}CLUSTER_TOKEN_FILE"] == "/etc/bidaw/cluster/token"
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in c and service != "gateway":
                    assert "grpc" not in c[probe], f"{service} {probe}: kubelet cannot do TLS"
                    command = c[probe]["exec"]["command"]
                    assert command[:2] == ["python3", "/opt/bidaw/healthcheck.py"]
                    assert build_parser().parse_args(command[2:]).service == service
            seen.add(service)
    assert seen == {"store", "scheduler", "worker", "gateway"}
