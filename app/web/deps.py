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
    """The multipart form (reading the body is I/O, hence async; the route that uses it is a plain def)."""
    limit = settings.max_upload_bytes
    try:
        form = await request.form(max_files=2, max_fields=300, max_part_size=limit)
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
                error = FieldError(UPLOAD_FIELD, f"the file is larger than the limit of {limit} bytes")
            else:
                upload = data
    finally:
        await form.close()
    return SubmittedForm(values, upload, error)


FormDep = Annotated[SubmittedForm, Depends(_submitted_form)]
