"""The service layer has its own package: app/api and app/web both import app/service, never each other, and
app/service imports neither; the planner processes' forkserver loads no web stack."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def _imports(package: str) -> set[str]:
    found = set()
    for path in (APP / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
    return found


def test_api_and_web_import_the_service_not_each_other() -> None:
    api, web, service = _imports("api"), _imports("web"), _imports("service")
    assert not {m for m in api if m.startswith("app.web")}, api
    assert not {m for m in web if m.startswith("app.api")}, web
    assert not {m for m in service if m.startswith(("app.api", "app.web"))}, service
    assert any(m.startswith("app.service") for m in api) and any(m.startswith("app.service") for m in web)


def test_the_planner_processes_import_no_web_framework() -> None:
    code = (
        "import sys, app.service.compute; "
        "print(sorted(m for m in ('fastapi', 'starlette', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=APP.parent)
    assert out.stdout.strip() == "[]"
