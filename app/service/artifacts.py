"""Rendered files of a plan (through `app.render`), their media types, and the bundle.zip of one rank."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field

from app import render as renderer
from app.planner.explain import describe
from app.planner.results import PlanResult

ARTIFACT_NAMES: tuple[str, ...] = tuple(renderer.ARTIFACT_NAMES)

_MEDIA_TYPES = {".json": "application/json", ".yaml": "application/yaml", ".sh": "text/x-shellscript"}
_EXECUTABLE = (".sh",)
_ZIP_EPOCH = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same plan gives the same bytes


@dataclass(frozen=True)
class Rendered:
    files: dict[str, str]
    renderer_version: str
    notices: list[str] = field(default_factory=list)


def renderer_version() -> str:
    return str(getattr(renderer, "__version__", ""))


def render_files(result: PlanResult, rank: int, options: renderer.RenderOptions | None) -> Rendered:
    """Render one ranked plan. A plan the renderer declines (ValueError) is stored without files, with a notice."""
    try:
        artifacts = renderer.render(result, rank=rank, options=options)
    except ValueError as exc:
        return Rendered({}, renderer_version(), [f"rank {rank}: no files rendered: {exc}"])
    return Rendered(dict(artifacts.files), renderer_version(), [f"files: {note}" for note in artifacts.notes])


def artifact_url(plan_id: str, name: str, rank: int) -> str:
    return f"/plans/{plan_id}/artifacts/{name}" + ("" if rank == 1 else f"?rank={rank}")


def media_type(name: str) -> str:
    for suffix, kind in _MEDIA_TYPES.items():
        if name.endswith(suffix):
            return kind
    return "text/plain"


def bundle_zip(plan_id: str, rank: int, files: dict[str, str], request: dict[str, object], result: PlanResult) -> bytes:
    """A zip of one rank's files in a folder, with the request and the planner's result next to them."""
    folder = f"trainplan-{plan_id}-rank{rank}"
    plan = result.plans[rank - 1]
    readme = (
        f"trainplan plan {plan_id}, rank {rank}: {describe(plan.parallel)}\n"
        f"{result.model.name} on {result.cluster.num_nodes} x {result.cluster.gpus_per_node} "
        f"{result.cluster.gpu.name}; planner {result.planner_version}\n\n" + "\n".join(plan.why) + "\n"
    )
    extra = {
        "README.txt": readme,
        "request.json": json.dumps(request, indent=2) + "\n",
        "result.json": result.model_dump_json(indent=2) + "\n",
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, content in sorted({**files, **extra}.items()):
            info = zipfile.ZipInfo(f"{folder}/{name}", date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if name.endswith(_EXECUTABLE) else 0o644) << 16
            zf.writestr(info, content)
    return buf.getvalue()
