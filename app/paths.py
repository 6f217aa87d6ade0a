"""Where the Jinja templates live: app/templates, a link to the top-level templates/ in a checkout and a real
directory inside an installed wheel (pyproject package-data), so both the renderer and the web pages find them
however trainplan was installed."""

from pathlib import Path

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
