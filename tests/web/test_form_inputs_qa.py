"""The form's config.json box, QA 2026-12-07: a paste over the upload limit gets the form back like an upload of
the same size (it was the form parser's 413 JSON, the whole form lost), and a config.json with a UTF-8 byte order
mark is read, uploaded or pasted (it was "Unexpected UTF-8 BOM")."""

from __future__ import annotations

import json
from typing import Any

from tests.api.conftest import make_sqlite_client
from tests.web.html_dom import element
from tests.web.test_forms import LLAMA_CONFIG
from tests.web.test_pages import PLAN_FORM, submit

HF_FORM = {**PLAN_FORM, "model_mode": "hf", "hf.seq_length": "2048", "hf.name": "keep-me"}
NO_FILE = {"hf.config": ("", b"", "application/octet-stream")}  # what a browser sends for the empty file input


def test_a_paste_over_the_upload_limit_gets_the_form_back(tmp_path: Any) -> None:
    with make_sqlite_client(f"sqlite:///{tmp_path / 'x.db'}", max_upload_bytes=1000) as web:
        big = json.dumps({**LLAMA_CONFIG, "pad": "x" * 2000})
        size = len(big.encode())
        r = submit(web, {**HF_FORM, "hf.config_text": big}, NO_FILE)
        assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), r.text[:300]
        said = element(r.text, "field-hf.config")[0]
        assert f"the pasted text (not kept) is {size:,} bytes, larger than the limit of 1,000 bytes" in said
        assert 'value="keep-me"' in r.text  # the other values kept
        upload = submit(web, HF_FORM, {"hf.config": ("config.json", big.encode(), "application/json")})
        assert upload.status_code == 422
        assert (
            f"the file is {size:,} bytes, larger than the limit of 1,000 bytes"
            in element(upload.text, "field-hf.config")[0]
        )
        small = submit(web, {**HF_FORM, "hf.config_text": json.dumps(LLAMA_CONFIG)}, NO_FILE)
        assert small.status_code == 303, small.text[:500]


def test_a_config_json_with_a_byte_order_mark_is_read(web: Any) -> None:
    text = "\ufeff" + json.dumps(LLAMA_CONFIG)
    upload = submit(web, HF_FORM, {"hf.config": ("config.json", text.encode(), "application/json")})
    assert upload.status_code == 303, upload.text[:500]
    pasted = submit(web, {**HF_FORM, "hf.config_text": text}, NO_FILE)
    assert pasted.status_code == 303, pasted.text[:500]
