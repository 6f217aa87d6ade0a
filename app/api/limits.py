"""Request-body size limit, as pure ASGI middleware: a declared Content-Length over the limit is refused before
anything is read; a body that streams past it (chunked, or a lying header) stops being read and is answered 413."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    pass


# A browser's form is refused before it is read, so its values cannot come back in a page: the browser's Back
# button keeps them (a tokenizer.json picked for config.json got the API's JSON and no way back, QA 2026-12-07).
PAGE_413 = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Too large: trainplan</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>The form was not sent</h1>
<p>{message}. An uploaded file is the usual cause: a config.json is a few KB (a tokenizer.json or weights are not
one).</p>
<p>Use your browser&#39;s Back button: it keeps what you typed; then choose a smaller file. Or start
<a href="/">a new plan</a>.</p></main></body></html>
"""


async def _send_413(send: Send, limit: int, html: bool) -> None:
    if html:
        body = PAGE_413.format(message=f"The request is larger than the limit of {limit:,} bytes").encode()
        kind = b"text/html; charset=utf-8"
    else:
        message = f"request body is larger than the limit of {limit} bytes"
        body = json.dumps({"detail": message, "errors": [{"field": "", "message": message}]}).encode()
        kind = b"application/json"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
        html = b"text/html" in headers.get(b"accept", b"")  # a browser's form post: a page, not the API's JSON
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _send_413(send, self.limit, html)
            return
        seen, exceeded, started = 0, False, False

        async def limited_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:  # the app caught the error and answered (FastAPI: 400); the answer is 413
                if not started:
                    started = True
                    await _send_413(send, self.limit, html)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            if not started:
                await _send_413(send, self.limit, html)
