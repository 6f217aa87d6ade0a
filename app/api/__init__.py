"""The REST API: routers, error handlers, OpenAPI for the request bodies, the body-size limit."""

from app.api.misc import router as misc_router
from app.api.plans import router as plans_router

__all__ = ["misc_router", "plans_router"]
