"""The web form for cluster admins: Jinja2 pages with server-rendered SVG charts, no JavaScript (routes.py)."""
