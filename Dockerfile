# trainplan service: REST API + web form over the planner and the renderer.
# No torch and no DeepSpeed in here: those live on the training nodes. Build from the repository root:
#   docker build -t trainplan .
#   docker run -p 127.0.0.1:8000:8000 -v trainplan-var:/app/var trainplan            # SQLite in the volume
#   docker run -p 127.0.0.1:8000:8000 -e DATABASE_URL=postgresql+psycopg://u:p@db:5432/trainplan trainplan
# Inside the container the server listens on 0.0.0.0 (the only way a published port reaches it); publish it on
# the host's loopback as above, and put a TLS proxy in front for other machines. The first start on an empty
# database prints an admin login and token to the log (docker logs).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The project as a package (its runtime dependencies and the PostgreSQL driver; no test extras), then the
# templates the renderer and the web form read from /app/templates.
COPY pyproject.toml README.md ./
COPY app ./app
COPY launcher ./launcher
COPY templates ./templates
RUN pip install ".[postgres]"

# An unprivileged user owns only the data directory (the SQLite file when DATABASE_URL is not set).
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin trainplan \
    && mkdir -p /app/var \
    && chown trainplan:trainplan /app/var
USER 10001:10001

ENV TRAINPLAN_HOST=0.0.0.0 \
    TRAINPLAN_PORT=8000 \
    TRAINPLAN_WORKERS=1 \
    TRAINPLAN_SQLITE_SYNCHRONOUS=FULL \
    TRAINPLAN_TEMPLATES_DIR=/app/templates \
    DATABASE_URL=sqlite:////app/var/trainplan.db

EXPOSE 8000
VOLUME ["/app/var"]

# Slim images have no curl: ask /healthz with Python (it also checks the database).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('TRAINPLAN_PORT', '8000') + '/healthz', timeout=4)"]

# `python -m app` from /app: the code next to its templates (what `trainplan serve` runs).
CMD ["python", "-m", "app", "serve"]
