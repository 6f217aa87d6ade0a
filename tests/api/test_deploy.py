"""Dockerfile and deploy/ cannot be built or applied here (no Docker engine, no cluster): check that they agree
with the code (files, ports, settings, probes), install no torch, run as non-root, and that the healthcheck works."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app.settings import ENV_NAMES, Settings
from app.store.db import normalize_url

# uvicorn's own: the peers whose X-Forwarded-For/-Proto it believes (Secure cookies, per-client rate limits)
UVICORN_PROXY = "FORWARDED_ALLOW_IPS"

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in text.splitlines() if line.strip()
    ]


def instructions(kind: str) -> list[str]:
    return [args for k, args in dockerfile() if k == kind]


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in instructions("ENV"):
        env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
    return env


def test_base_image_is_slim_python_311() -> None:
    assert instructions("FROM") == ["python:3.11-slim"]


def test_copied_paths_exist_and_cover_what_the_app_imports() -> None:
    sources = [shlex.split(args)[:-1] for args in instructions("COPY")]
    copied = {s for group in sources for s in group}
    for path in copied:
        assert (ROOT / path).exists(), path
    assert {"pyproject.toml", "app", "templates", "launcher"} <= copied  # the renderer imports launcher.spec


def test_installs_the_project_without_test_extras_or_torch() -> None:
    installs = [m.strip() for run in instructions("RUN") for m in re.findall(r"pip install ([^&;]+)", run)]
    assert installs == ['".[postgres]"']
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wheels = project["dependencies"] + project["optional-dependencies"]["postgres"]
    assert not [w for w in wheels if re.match(r"(torch|deepspeed|megatron)", w)]
    assert not [args for _kind, args in dockerfile() if re.search(r"torch|deepspeed|megatron", args, re.I)]


def test_runs_as_a_non_root_user() -> None:
    users = instructions("USER")
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r"useradd[^&]*--uid " + users[-1].split(":")[0], " ".join(instructions("RUN")))


def test_environment_ports_and_command_match_the_settings() -> None:
    env = docker_env()
    assert set(env) - {
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PIP_NO_CACHE_DIR",
        "PIP_DISABLE_PIP_VERSION_CHECK",
    } <= set(ENV_NAMES.values())
    settings = Settings.from_env(env)  # every value parses
    assert instructions("EXPOSE") == [str(settings.port)] and settings.host == "0.0.0.0"
    assert normalize_url(settings.database_url).database == "/app/var/trainplan.db"
    assert instructions("VOLUME") == ['["/app/var"]']
    assert str(settings.templates_dir) == "/app/templates"
    assert json.loads(instructions("CMD")[0]) == ["python", "-m", "app", "serve"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_the_healthcheck_command_passes_against_a_running_service(tmp_path: Path) -> None:
    check = instructions("HEALTHCHECK")[0]
    assert "--interval=" in check and "/healthz" in check
    argv = json.loads(check.split("CMD", 1)[1])
    assert argv[:2] == ["python", "-c"]
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'h.db'}",
        "TRAINPLAN_PORT": str(port),
        "PYTHONPATH": str(ROOT),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "app", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        down = subprocess.run(
            [sys.executable, "-c", argv[2]],
            env={**env, "TRAINPLAN_PORT": str(_free_port())},
            capture_output=True,
            timeout=30,
        )
        assert down.returncode != 0  # nothing listens there: unhealthy
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        up = subprocess.run([sys.executable, "-c", argv[2]], env=env, capture_output=True, timeout=30)
        assert up.returncode == 0, up.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)


def _k8s() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_kubernetes_deployment_service_and_postgres_agree() -> None:
    objs = _k8s()
    deployment, service = objs[("Deployment", "trainplan")], objs[("Service", "trainplan")]
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e for e in container["env"]}
    assert set(env) <= set(ENV_NAMES.values()) | {UVICORN_PROXY}
    assert UVICORN_PROXY in env  # the proxy is never 127.0.0.1 in a container (QA 2026-12-07)
    assert int(env["TRAINPLAN_PORT"]["value"]) == ports["http"] == docker_env_port()
    assert env["TRAINPLAN_HOST"]["value"] == "0.0.0.0"
    Settings.from_env({k: e["value"] for k, e in env.items() if "value" in e})
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    assert service["spec"]["type"] == "ClusterIP"  # inside the cluster only
    assert env["TRAINPLAN_WORKERS"]["value"] == "1"
    limit = container["resources"]["limits"]["cpu"]
    assert env["TRAINPLAN_PLANNER_PROCESSES"]["value"] == limit  # the pod's cores, not the node's
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert str(pod["spec"]["securityContext"]["runAsUser"]) == instructions("USER")[-1].split(":")[0]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/app/var" in mounts  # writable despite the read-only root filesystem
    # the PostgreSQL option: the Secret's URL names the postgres Service and port, with the psycopg driver
    ref = env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    secret = objs[("Secret", ref["name"])]
    url = normalize_url(secret["stringData"][ref["key"]])
    pg_service = objs[("Service", url.host)]
    assert url.drivername == "postgresql+psycopg" and url.port == pg_service["spec"]["ports"][0]["port"]
    pg = objs[("StatefulSet", url.host)]["spec"]["template"]["spec"]["containers"][0]
    pg_env = {e["name"]: e for e in pg["env"]}
    assert pg_env["POSTGRES_USER"]["value"] == url.username and pg_env["POSTGRES_DB"]["value"] == url.database
    assert pg_env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == ref["name"]
    assert secret["stringData"]["password"] == url.password


def docker_env_port() -> int:
    return int(docker_env()["TRAINPLAN_PORT"])


def test_compose_app_and_database_agree() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    app, db = compose["services"]["app"], compose["services"]["db"]
    build = app["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == ROOT / "Dockerfile"
    env = app["environment"]
    assert set(env) <= set(ENV_NAMES.values()) | {UVICORN_PROXY}
    assert UVICORN_PROXY in env  # the proxy is never 127.0.0.1 in a container (QA 2026-12-07)
    settings = Settings.from_env({k: str(v) for k, v in env.items()})
    host_ip, _host_port, container_port = app["ports"][0].split(":")
    assert int(container_port) == settings.port and host_ip == "127.0.0.1"  # the host's loopback only
    assert "ports" not in db  # the database is not published at all
    assert settings.workers == 1
    url = normalize_url(settings.database_url)
    assert url.host == "db" and url.username == db["environment"]["POSTGRES_USER"]
    assert url.password == db["environment"]["POSTGRES_PASSWORD"] and url.database == db["environment"]["POSTGRES_DB"]
    assert app["depends_on"]["db"]["condition"] == "service_healthy" and "healthcheck" in db
    assert any(v.endswith(":/app/var") for v in app["volumes"])


def test_network_policies_let_only_trainplan_reach_the_database() -> None:
    objs = _k8s()
    app_policy, db_policy = objs[("NetworkPolicy", "trainplan")], objs[("NetworkPolicy", "trainplan-postgres")]
    app_labels = objs[("Deployment", "trainplan")]["spec"]["template"]["metadata"]["labels"]
    db_labels = objs[("StatefulSet", "trainplan-postgres")]["spec"]["template"]["metadata"]["labels"]
    assert app_policy["spec"]["podSelector"]["matchLabels"].items() <= app_labels.items()
    assert db_policy["spec"]["podSelector"]["matchLabels"].items() <= db_labels.items()
    (rule,) = db_policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": app_policy["spec"]["podSelector"]["matchLabels"]}}]
    assert rule["ports"] == [{"port": "postgres"}]
    assert app_policy["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]  # this namespace only


def test_docker_examples_publish_on_loopback() -> None:
    text = (ROOT / "Dockerfile").read_text() + (ROOT / "docs" / "service.md").read_text()
    runs = re.findall(r"docker run (-p \S+)", text)
    assert runs and all(r.startswith("-p 127.0.0.1:") for r in runs), runs
