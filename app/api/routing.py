"""The API's routes read JSON bodies strictly (app/service/jsonbody.py) before FastAPI validates them against
the route's pydantic body: the custom-request pattern of FastAPI's documentation ("Custom Request and APIRoute
class"), with `json()` replaced. A body that is not one strict JSON object is refused with the service's own
messages (415 for another content type), so the typed body never sees NaN, 1e400, a lone surrogate or 10,000
levels of nesting."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.service.jsonbody import parse_json_object


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_strict_json"):
            self._strict_json = parse_json_object(await self.body(), self.headers.get("content-type"))
        return self._strict_json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        has_body = self.body_field is not None

        async def strict(request: Request) -> Response:
            request = StrictJSONRequest(request.scope, request.receive)
            if has_body:
                await request.json()  # the service's refusal (BodyError) before FastAPI's own reading
            return await handler(request)

        return strict
