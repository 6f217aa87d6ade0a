"""trainplan's renderer: one ranked plan -> DeepSpeed JSON, Megatron arguments, NCCL exports, launch files, plan.json.

    from app.render import render, RenderOptions, write_artifacts
    arts = render(result, rank=1, options=RenderOptions(job_name="llama"))
    write_artifacts(arts, "out/")

Imports no web framework; templates live in templates/ at the repository root.
"""

from app.render.options import RenderOptions
from app.render.plan_json import RENDERER_VERSION as __version__
from app.render.render import ARTIFACT_NAMES, Artifacts, render, write_artifacts

__all__ = ["ARTIFACT_NAMES", "Artifacts", "RenderOptions", "__version__", "render", "write_artifacts"]
