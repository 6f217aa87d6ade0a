"""Hugging Face config.json files of each family the importer reads (as released, trimmed to the keys it reads):
tests/web/data/<name>.config.json, also uploaded as files by the browser tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
HF_CONFIGS: dict[str, dict[str, Any]] = {
    path.name.removesuffix(".config.json"): json.loads(path.read_text()) for path in sorted(DATA.glob("*.config.json"))
}
