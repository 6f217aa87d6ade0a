"""The service tests use the web tests' app on a SQLite file."""

from tests.web.conftest import web  # noqa: F401
