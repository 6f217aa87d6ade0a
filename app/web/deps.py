"""The pages' own FastAPI dependencies (the shared ones: app/service/deps.py): the templates and the form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.planner.errors import FieldError
from app.service.deps import SettingsDep
from app.service.jsonbody import BodyError
from app.web.templates import WebTemplates

UPLOAD_FIELD = "hf.config"
PASTE_FIELD = "hf.config_text"


def _templates(request: Request) -> WebTemplates:
    templates: WebTemplates = request.app.state.templates
    return templates


TemplatesDep = Annotated[WebTemplates, Depends(_templates)]


@dataclass(frozen=True)
class SubmittedForm:
    values: dict[str, str]  # every text field as typed
    upload: bytes | None  # the config.json file, if one was chosen and is within the limit
    upload_error: FieldError | None


async def _submitted_form(request: Request, settings: SettingsDep) -> SubmittedForm:
    """The multipart form (reading the body is I/O, hence async; the route that uses it is a plain def). A text part
    is bounded by the body's own limit, not the upload's: a config.json pasted over the upload limit was the form
    parser's 413 JSON and the whole form was lost, where the same file uploaded got the form back (QA 2026-12-07)."""
    limit = settings.max_upload_bytes
    try:
        form = await request.form(max_files=2, max_fields=300, max_part_size=settings.max_body_bytes)
    except StarletteHTTPException as exc:  # the form parser's 400 (a part over the limit, too many fields, ...)
        status = 413 if "maximum size" in str(exc.detail) else 422
        raise BodyError([FieldError("", f"the form could not be read: {exc.detail}")], status) from None
    try:
        values = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        file = form.get(UPLOAD_FIELD)
        upload, error = None, None
        if isinstance(file, UploadFile) and file.filename:
            data = await file.read(limit + 1)
            if len(data) > limit:
                error = _too_large("the file", file.size or len(data), limit)
            else:
                upload = data
        pasted = len(values.get(PASTE_FIELD, "").encode("utf-8", errors="surrogatepass"))
        if upload is None and error is None and pasted > limit:
            values[PASTE_FIELD] = ""  # not sent back: a page the size of the paste, which must be cut anyway
            error = _too_large("the pasted text (not kept)", pasted, limit)
    finally:
        await form.close()
    return SubmittedForm(values, upload, error)


def _too_large(what: str, size: int, limit: int) -> FieldError:
    return FieldError(UPLOAD_FIELD, f"{what} is {size:,} bytes, larger than the limit of {limit:,} bytes")


FormDep = Annotated[SubmittedForm, Depends(_submitted_form)]
