"""The service distribution: model/ and service/ alone, with the base dependencies of pyproject.toml.

The service image (docker/service.Dockerfile) installs the base dependencies, then a wheel built from a tree that
holds model/, service/ and the pyproject.toml this script writes: distribution ``rcb-service``, the project's
version, build system and ``[project].dependencies``, no optional extras, no ``rcb`` console script (rcb/ and
training/ are not in it). Entry point: ``python -m service``. Standard library only (it runs before anything is
installed).

    python service_dist.py requirements PYPROJECT      # the base dependencies, one a line
    python service_dist.py pyproject PYPROJECT         # the service distribution's pyproject.toml
    python service_dist.py tree PYPROJECT OUT          # OUT/pyproject.toml + OUT/model + OUT/service
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

NAME = "rcb-service"
PACKAGES = ("model", "service")


def _load(pyproject: Path) -> dict:
    with open(pyproject, "rb") as f:
        return tomllib.load(f)


def requirements(pyproject: Path) -> list[str]:
    """``[project].dependencies``: what the service needs (never the optional extras)."""
    return list(_load(pyproject)["project"]["dependencies"])


def _toml(value: object) -> str:
    """A TOML value for a string or a list of strings (JSON's escapes are TOML's)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"not a string or list of strings: {value!r}")


def service_pyproject(pyproject: Path) -> str:
    config = _load(pyproject)
    project = config["project"]
    include = [pattern for package in PACKAGES for pattern in (package, f"{package}.*")]
    package_data = config.get("tool", {}).get("setuptools", {}).get("package-data", {})
    lines = [
        "# Written by docker/service_dist.py from the project's pyproject.toml: model/ and service/ only.",
        "[build-system]",
        f"requires = {_toml(config['build-system']['requires'])}",
        f"build-backend = {_toml(config['build-system']['build-backend'])}",
        "",
        "[project]",
        f"name = {_toml(NAME)}",
        f"version = {_toml(project['version'])}",
        f"description = {_toml('The rcb bidding service (model/ and service/): python -m service')}",
        f"requires-python = {_toml(project['requires-python'])}",
        f"dependencies = {_toml(requirements(pyproject))}",
        "",
        "[tool.setuptools.packages.find]",
        f"include = {_toml(include)}",
    ]
    shipped = {package: files for package, files in package_data.items() if package.split(".")[0] in PACKAGES}
    if shipped:
        lines += ["", "[tool.setuptools.package-data]"]
        lines += [f"{_toml(package)} = {_toml(list(files))}" for package, files in shipped.items()]
    return "\n".join(lines) + "\n"


def write_tree(pyproject: Path, out: Path) -> Path:
    """The wheel's source tree in ``out`` (what the Dockerfile's builder stage assembles with COPY)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "pyproject.toml").write_text(service_pyproject(pyproject))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(pyproject.parent / package, out / package, ignore=ignore, dirs_exist_ok=True)
    return out


def main(argv: list[str]) -> int:
    match argv:
        case ["requirements", pyproject]:
            print("\n".join(requirements(Path(pyproject))))
        case ["pyproject", pyproject]:
            sys.stdout.write(service_pyproject(Path(pyproject)))
        case ["tree", pyproject, out]:
            write_tree(Path(pyproject), Path(out))
        case _:
            usage = [line.strip() for line in (__doc__ or "").splitlines() if "service_dist.py" in line]
            print("usage:\n  " + "\n  ".join(usage), file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
