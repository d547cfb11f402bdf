# tablesafe: one image for the table builder (tablesafe serve) and its job workers
# (tablesafe worker). Checked by hadolint and tests/test_deployment.py (no docker here).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The PostgreSQL state store and Prometheus metrics: what replicas need. DL3013 asks for
# pinned versions: this installs the project itself, whose pyproject bounds its dependencies.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --prefix=/install ".[postgres,server]"

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --create-home --home-dir /srv/tablesafe tablesafe
COPY --from=build /install /usr/local
WORKDIR /srv/tablesafe
USER 10001
EXPOSE 8000
# Liveness: the process answers (readiness, /readyz, is for the orchestrator to ask).
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# SIGTERM: the server answers the requests in flight ([server] shutdown_timeout_seconds);
# a worker finishes its job.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tablesafe"]
CMD ["serve", "--config", "/etc/tablesafe/site.toml", "--host", "0.0.0.0", "--port", "8000"]
