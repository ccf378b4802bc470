"""The deployment files agree with the code they deploy.

deploy/k8s/ is documented only (no cluster, Helm or Docker engine runs here): these checks
catch a renamed module, port, setting or extra, not a chart that fails to install.
"""

from __future__ import annotations

import json
import re

import tomli  # a Dagster dependency; tomllib only from Python 3.11
import yaml
from dagster import Definitions

from statepool_dagster.core.config import Settings

from process_helpers import REPO

K8S = REPO / "deploy" / "k8s"
# Top-level keys of the dagster/dagster chart's values (its schema: DagsterHelmValues).
CHART_KEYS = {
    "dagsterWebserver",
    "dagster-user-deployments",
    "postgresql",
    "generatePostgresqlPasswordSecret",
    "generateCeleryConfigSecret",
    "rabbitmq",
    "redis",
    "flower",
    "ingress",
    "imagePullSecrets",
    "computeLogManager",
    "scheduler",
    "runLauncher",
    "pythonLogs",
    "dagsterDaemon",
    "busybox",
    "migrate",
    "telemetry",
    "serviceAccount",
    "global",
    "retention",
    "concurrency",
    "additionalInstanceConfig",
}


def _workspace_module() -> tuple[str, str]:
    [entry] = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    module = entry["python_module"]
    return module["module_name"], module["attribute"]


def _values() -> dict:
    return yaml.safe_load((K8S / "values.yaml").read_text())


def _deployment() -> dict:
    [deployment] = _values()["dagster-user-deployments"]["deployments"]
    return deployment


def _dockerfile_cmd() -> list[str]:
    [line] = [x for x in (K8S / "Dockerfile").read_text().splitlines() if x.startswith("CMD ")]
    return json.loads(line.removeprefix("CMD "))


def _pyproject() -> dict:
    return tomli.loads((REPO / "pyproject.toml").read_text())


def test_values_use_only_the_charts_keys():
    assert set(_values()) <= CHART_KEYS
    assert _values()["runLauncher"]["type"] == "K8sRunLauncher"
    assert _values()["dagsterDaemon"]["enabled"] is True


def test_the_code_server_loads_the_workspaces_definitions():
    module, attribute = _workspace_module()
    grpc_args = _deployment()["dagsterApiGrpcArgs"]
    assert grpc_args == ["-m", module, "-a", attribute]
    cmd = _dockerfile_cmd()
    assert cmd[:3] == ["dagster", "api", "grpc"]
    assert cmd[cmd.index("-m") + 1] == module and cmd[cmd.index("-a") + 1] == attribute
    loaded = getattr(__import__(module, fromlist=[attribute]), attribute)
    assert isinstance(loaded(), Definitions)  # the code location's @definitions function


def test_the_image_serves_on_the_port_the_chart_calls():
    cmd = _dockerfile_cmd()
    exposed = re.search(r"^EXPOSE (\d+)$", (K8S / "Dockerfile").read_text(), re.MULTILINE)
    assert int(cmd[cmd.index("-p") + 1]) == int(exposed.group(1)) == _deployment()["port"]


def test_the_deployments_settings_exist():
    names = {Settings.env_name(field) for field in Settings.model_fields}
    env = {e["name"] for e in _deployment()["env"]}
    assert env <= names, env - names
    assert {"STATEPOOL_RUNS_DIR", "STATEPOOL_STORE_DIR"} <= env
    celery = yaml.safe_load((REPO / "deploy" / "celery" / "celery.yaml").read_text())
    sources = {v["env"] for v in celery["execution"]["config"].values()}
    assert sources == {Settings.env_name("celery_broker"), Settings.env_name("celery_backend")}


def test_the_image_installs_extras_that_exist():
    dockerfile = (K8S / "Dockerfile").read_text()
    [extras] = re.findall(r"pip install '\.\[([a-z0-9_,-]+)\]'", dockerfile)
    assert set(extras.split(",")) <= set(_pyproject()["project"]["optional-dependencies"])


def test_dagster_libraries_and_chart_are_pinned_to_one_release():
    """dagster 1.13.N ships with its libraries at 0.29.N and its Helm chart at 1.13.N."""
    project = _pyproject()["project"]
    extras = project["optional-dependencies"].values()
    pins = [*project["dependencies"], *(pin for extra in extras for pin in extra)]
    [dagster] = [p.split("==")[1] for p in pins if p.startswith("dagster==")]
    release = dagster.split(".")[-1]
    libraries = [p for p in pins if re.match(r"dagster-[a-z]+==", p)]
    assert libraries
    # Dagster 1.0 shipped with libraries at 0.16: the libraries' minor is dagster's plus 16.
    library_release = f"0.{int(dagster.split('.')[1]) + 16}.{release}"
    for pin in libraries:
        assert pin.split("==")[1] in (dagster, library_release), pin
    [chart] = re.findall(r"--version (\S+)", (K8S / "values.yaml").read_text())
    assert chart == dagster
