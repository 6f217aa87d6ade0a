"""The REST API: routers, error handlers, OpenAPI, the body-size limit, the offline /docs page."""

from app.api.clusters import router as clusters_router
from app.api.deadline import router as deadline_router
from app.api.misc import router as misc_router
from app.api.plans import router as plans_router

__all__ = ["clusters_router", "deadline_router", "misc_router", "plans_router"]
