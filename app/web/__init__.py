"""The web form for cluster admins: Jinja2 pages with server-rendered SVG charts, no JavaScript."""

from app.web.routes import router

__all__ = ["router"]
