"""Golden files: the rendered artifacts of a handful of plans, reviewed by eye once and compared byte for byte.

Each case stores its input (the PlanResult and the RenderOptions) next to its files, so that a change in the
planner's cost model or ranking does not move the goldens; a change in what the renderer writes does.
Regenerate, then review the diff:
    TRAINPLAN_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/render/test_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from render_cases import GOLDEN, Case, fixed_result

from app.planner.results import PlanResult
from app.render import RenderOptions, render

GOLDEN_DIR = Path(__file__).parent / "golden"
INPUT, NOTES = "_input.json", "_notes.txt"
UPDATE = os.environ.get("TRAINPLAN_UPDATE_GOLDEN") == "1"


def _write(case: Case, d: Path) -> None:
    result = fixed_result(case.request, case.parallel)
    options = RenderOptions(**case.options)
    d.mkdir(parents=True, exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    (d / INPUT).write_text(
        json.dumps(
            {
                "options": options.model_dump(mode="json", exclude_defaults=True),
                "result": result.model_dump(mode="json"),
            },
            indent=1,
        )
        + "\n"
    )
    arts = render(result, 1, options)
    for name, text in arts.files.items():
        (d / name).write_bytes(text.encode())
    (d / NOTES).write_text("".join(f"{n}\n" for n in arts.notes))


@pytest.mark.parametrize("case", GOLDEN, ids=[c.name for c in GOLDEN])
def test_rendered_files_match_the_golden_files(case: Case) -> None:
    d = GOLDEN_DIR / case.name
    if UPDATE:
        _write(case, d)
    assert (d / INPUT).is_file(), f"no golden for {case.name}: run with TRAINPLAN_UPDATE_GOLDEN=1 and review"
    stored = json.loads((d / INPUT).read_text())
    try:
        result = PlanResult.model_validate(stored["result"])
    except ValueError as exc:
        pytest.fail(
            f"{case.name}: the stored PlanResult no longer loads ({exc}); regenerate with "
            f"TRAINPLAN_UPDATE_GOLDEN=1 and review the diff"
        )
    arts = render(result, 1, RenderOptions(**stored["options"]))
    expected = sorted(p.name for p in d.iterdir() if p.name not in (INPUT, NOTES))
    assert sorted(arts.files) == expected
    for name, text in arts.files.items():
        assert text.encode() == (d / name).read_bytes(), f"{case.name}/{name} differs from its golden file"
    assert "".join(f"{n}\n" for n in arts.notes) == (d / NOTES).read_text()


def test_golden_input_matches_the_case_definition() -> None:
    """The stored options are the case's (the stored result is a snapshot of the planner at review time)."""
    for case in GOLDEN:
        stored = json.loads((GOLDEN_DIR / case.name / INPUT).read_text())
        assert RenderOptions(**stored["options"]) == RenderOptions(**case.options), case.name
        assert stored["result"]["plans"][0]["parallel"] == {
            **stored["result"]["plans"][0]["parallel"],
            **case.parallel,
        }, case.name
