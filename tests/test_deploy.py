"""deploy/: compose.yaml and the Helm chart are valid, and run what launch.sh runs.

The expected commands come from the launcher itself (serving/launcher.make_plan,
serving/replicas.router_command, serving/ui_main.ui_command, serving/proxy.ProxyPlan), so a
change of a flag there that the deployment files do not follow fails here. What a container
needs differently is named once, in :func:`in_container`: servers listen on 0.0.0.0 (vLLM on
port 8000), and the router is given its replicas at start.

Tools, all from the reachable registries: Debian's ``docker-compose`` (``config``, installed
by tests/run.sh), PyPI's ``helm-python-sdk`` (Helm's own Go SDK: render, lint, schema),
``kubernetes-validate`` (the manifests against Kubernetes' schemas, strict) and ``yamllint``.
No container engine or cluster runs here: no image is built, nothing is deployed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from serving import proxy
from serving.front import front_config
from serving.launcher import make_plan
from serving.replicas import router_command
from serving.settings import LaunchSettings
from serving.ui_main import ui_command

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm"
VLLM_PORT = "8000"
SECRETS = {"KIMI_API_KEY": "k", "CHAINLIT_AUTH_SECRET": "s", "POSTGRES_PASSWORD": "p"}


def in_container(args: list[str], **values: str) -> list[str]:
    """``args`` with each ``--flag value`` of ``values`` (``host="0.0.0.0"``) set."""
    changed = list(args)
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        changed[changed.index(flag) + 1] = value
    return changed


def launch_vllm_args(**settings: Any) -> list[str]:
    """``vllm serve``'s arguments as launch.sh plans them on a GPU host, in a container."""
    launch = LaunchSettings(**settings)
    gpus = launch.tensor_parallel_size or 1
    plan = make_plan(launch, mode="gpu", gpus=gpus, reasoning_plugin=True)
    return in_container(plan.args, host="0.0.0.0", port=VLLM_PORT)


def launch_router_args(port: int, metrics_port: int, workers: list[str]) -> list[str]:
    command = router_command("vllm-router", port=port, metrics_port=metrics_port)
    return [*in_container(command, host="0.0.0.0", prometheus_host="0.0.0.0"),
            "--worker-urls", *workers]  # fmt: skip


def launch_ui_args(port: int) -> list[str]:
    command = ui_command("0.0.0.0", port)
    assert command[0] == sys.executable
    return ["python", *command[1:]]


# --- compose.yaml ---------------------------------------------------------------------

needs_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="docker-compose is not installed (Debian: apt-get install docker-compose)",
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """compose.yaml as ``docker-compose config`` resolves it (anchors, variables)."""
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (Debian: apt-get install docker-compose)")
    done = subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config"],
        env={"PATH": "/usr/bin:/bin", **SECRETS}, cwd=DEPLOY,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    resolved: dict[str, Any] = yaml.safe_load(done.stdout)
    return resolved


@needs_compose
def test_compose_refuses_to_start_without_its_secrets() -> None:
    done = subprocess.run(
        ["docker-compose", "-f", str(DEPLOY / "compose.yaml"), "config", "-q"],
        env={"PATH": "/usr/bin:/bin"}, cwd=DEPLOY,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    assert "set KIMI_API_KEY in deploy/.env" in done.stderr


def test_compose_replicas_run_launch_shs_vllm_serve_each_on_its_own_gpu(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    replicas = sorted(name for name in services if name.startswith("vllm-"))
    assert replicas == ["vllm-1", "vllm-2"]
    for number, name in enumerate(replicas):
        service = services[name]
        assert service["entrypoint"] == ["vllm"]
        assert service["command"] == launch_vllm_args()
        assert service["environment"]["VLLM_API_KEY"] == "k"  # the key never in a command
        assert "k" not in service["command"]
        plugin = Path(service["working_dir"]) / "serving/kimi_reasoning_parser.py"
        assert service["environment"]["VLLM_TUNED_CONFIG_FOLDER"] == "/app/serving/moe_configs"
        assert plugin == Path("/app/serving/kimi_reasoning_parser.py")
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["device_ids"] == [str(number)]


def test_compose_router_and_ui_workers_run_launch_shs_commands(compose: dict[str, Any]) -> None:
    services = compose["services"]
    router = services["router"]["command"]
    assert router == launch_router_args(8100, 8199, ["http://vllm-1:8000", "http://vllm-2:8000"])
    for name in ("ui-1", "ui-2"):
        ui = services[name]
        assert ui["command"] == launch_ui_args(8300)
        env = ui["environment"]
        assert env["KIMI_BASE_URL"] == "http://router:8100/v1"
        assert env["KIMI_DATABASE_URL"] == "postgresql+asyncpg://kimi:p@postgres/kimi"
        assert env["CHAINLIT_AUTH_SECRET"] == "s"
        assert ui["volumes"] == ["files:/data:rw"]  # the one volume every worker shares
    # Only HAProxy is published, and on this host's loopback only.
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert list(published) == ["haproxy"]
    assert published["haproxy"] == ["127.0.0.1:8300:8300/tcp"]


def config_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_compose_haproxy_config_is_launch_shs_for_the_two_workers() -> None:
    written = (DEPLOY / "haproxy.cfg").read_text()
    front = front_config(("0.0.0.0", 8300), [("ui-1", 8300), ("ui-2", 8300)])
    assert config_lines(written) == config_lines(front)


@pytest.mark.skipif(proxy.find_haproxy() is None, reason="haproxy is not installed")
def test_compose_haproxy_config_is_valid(tmp_path: Path) -> None:
    # The workers' container names resolve only inside compose's network.
    text = (DEPLOY / "haproxy.cfg").read_text().replace("ui-1:", "127.0.0.1:")
    config = tmp_path / "haproxy.cfg"
    config.write_text(text.replace("ui-2:", "127.0.0.1:"))
    assert proxy.validate(config, proxy.find_haproxy() or "haproxy") == ""


# --- the Helm chart ---------------------------------------------------------------------


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's manifests as Helm renders them (release ``kimi``), schema checked."""
    import helm_python as helm  # a 240 MB shared library: loaded by these tests only

    chart = helm.Chart.load(str(CHART))
    try:
        chart.validate_schema(values or {})
        rendered = chart.render(values or {}, name="kimi", namespace="chat")
    finally:
        chart.close()
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(found) == 1
    return found[0]


def test_chart_renders_valid_kubernetes_manifests() -> None:
    docs = render()
    assert {d["kind"] for d in docs} == {
        "Deployment", "Service", "PersistentVolumeClaim",
    }  # fmt: skip
    for doc in docs:
        kubernetes_validate.validate(doc, "1.33", strict=True)


def test_chart_lints_and_refuses_values_outside_its_schema() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError):
        render({"vllm": {"replicas": 0}})
    with pytest.raises(helm.HelmError):
        render({"model": {"gpuMemoryUtilization": 1.5}})


def replicas_of(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    deployments = of_kind(docs, "Deployment")
    return [deployments[name] for name in sorted(deployments) if "-vllm-" in name]


@pytest.mark.parametrize(("replicas", "tp"), [(2, 1), (3, 2)])
def test_chart_replicas_run_launch_shs_vllm_serve(replicas: int, tp: int) -> None:
    docs = render({"vllm": {"replicas": replicas, "tensorParallelSize": tp}})
    deployments = replicas_of(docs)
    assert len(deployments) == replicas
    services = of_kind(docs, "Service")
    for deployment in deployments:
        vllm = container(deployment)
        assert vllm["command"] == ["vllm"]
        assert vllm["args"] == launch_vllm_args(tensor_parallel_size=tp)
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] == tp
        env = {e["name"]: e for e in vllm["env"]}
        assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "api-key"
        workdir = Path(vllm["workingDir"])
        assert env["VLLM_TUNED_CONFIG_FOLDER"]["value"] == str(workdir / "serving/moe_configs")
        assert deployment["metadata"]["name"] in services
    router = container(of_kind(docs, "Deployment")["kimi-kimi-router"])
    urls = [f"http://kimi-kimi-vllm-{i}:8000" for i in range(1, replicas + 1)]
    assert router["command"] + router["args"] == launch_router_args(8100, 8199, urls)


def test_chart_instruct_serves_without_the_reasoning_parser() -> None:
    docs = render({"model": {"name": "moonshotai/Kimi-VL-A3B-Instruct",
                             "servedName": "kimi-vl", "reasoningParser": ""}})  # fmt: skip
    args = container(replicas_of(docs)[0])["args"]
    assert args == launch_vllm_args(instruct=True)


def test_chart_ui_runs_launch_shs_command_with_session_affinity() -> None:
    docs = render()
    ui = of_kind(docs, "Deployment")["kimi-kimi-ui"]
    assert ui["spec"]["replicas"] == 2
    worker = container(ui)
    assert worker["command"] + worker["args"] == launch_ui_args(8300)
    env = {e["name"]: e for e in worker["env"]}
    assert env["KIMI_BASE_URL"]["value"] == "http://kimi-kimi-router:8100/v1"
    for name, key in [("KIMI_API_KEY", "api-key"), ("CHAINLIT_AUTH_SECRET", "auth-secret"),
                      ("KIMI_DATABASE_URL", "database-url")]:  # fmt: skip
        assert env[name]["valueFrom"]["secretKeyRef"]["key"] == key
    service = of_kind(docs, "Service")["kimi-kimi-ui"]
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    # Without a bucket, every pod mounts the one shared claim for files.
    [claim] = of_kind(docs, "PersistentVolumeClaim")
    assert of_kind(docs, "PersistentVolumeClaim")[claim]["spec"]["accessModes"] == ["ReadWriteMany"]
    volume = ui["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"]["claimName"] == claim


def test_chart_ui_with_a_bucket_uses_s3_and_no_claim() -> None:
    docs = render({"ui": {"s3": {"bucket": "chats", "endpointUrl": "http://s3:8333",
                                 "region": ""}}})  # fmt: skip
    assert not of_kind(docs, "PersistentVolumeClaim")
    env = {e["name"]: e for e in container(of_kind(docs, "Deployment")["kimi-kimi-ui"])["env"]}
    assert env["KIMI_FILES_S3_BUCKET"]["value"] == "chats"
    assert env["KIMI_FILES_S3_ENDPOINT_URL"]["value"] == "http://s3:8333"


# --- YAML style -------------------------------------------------------------------------


def yaml_files() -> Iterator[Path]:
    yield DEPLOY / "compose.yaml"
    yield CHART / "Chart.yaml"
    yield CHART / "values.yaml"


def test_deployment_yaml_lints_clean() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "yamllint", "-d",
         "{extends: default, rules: {line-length: {max: 110}, document-start: disable, "
         "comments: {min-spaces-from-content: 1}}}", *map(str, yaml_files())],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


# --- a worker behind a front on another host ---------------------------------------------


async def test_a_worker_answers_another_hosts_health_check_without_its_count() -> None:
    """HAProxy on another host (deploy/haproxy.cfg, a front of several hosts) checks
    ``/kimi/status``: the worker answers 200, and only loopback callers get the count."""
    from starlette.requests import Request

    from ui import status

    async def ask(client: str) -> tuple[int, bytes]:
        scope = {"type": "http", "method": "GET", "path": status.PATH, "headers": [],
                 "query_string": b"", "client": (client, 40000)}  # fmt: skip
        response = await status.status(Request(scope))
        return response.status_code, bytes(response.body)

    assert await ask("10.231.7.1") == (200, b"{}")
    code, body = await ask("127.0.0.1")
    assert code == 200 and b"open_chats" in body
