# syntax=docker/dockerfile:1
#
# snowsource as a container: multi-stage build, slim Python base, runs as a non-root user.
#
#   docker build -t snowsource:0.1.0 .
#   docker run --rm -v "$PWD/config.yaml:/etc/snowsource/config.yaml:ro" -p 8083:8083 snowsource:0.1.0
#   docker run --rm -v "$PWD/config.yaml:/etc/snowsource/config.yaml:ro" snowsource:0.1.0 check
#
# scripts/image.sh build does the same where no Docker or Podman engine works (docs/operations.md).
#
# The configuration is read from /etc/snowsource/config.yaml (also $SNOWSOURCE_CONFIG, so every
# subcommand finds it without --config). Set `rest.host: 0.0.0.0` in it so the health checks,
# Kubernetes probes and Prometheus can reach the REST port from outside the container.
# Secrets: mount files and use `<key>.file`, or SNOWSOURCE_* variables (docs/configuration.md).
#
# Behind a TLS-inspecting proxy, hand pip the proxy's CA bundle for the build only; it is mounted
# into the install steps and never stored in a layer:
#   docker build --secret id=pip_cert,src=/etc/ssl/certs/ca-certificates.crt -t snowsource:0.1.0 .

ARG PYTHON_VERSION=3.11

# ---------------------------------------------------------------------------------- build stage
FROM python:${PYTHON_VERSION}-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# A self-contained virtualenv that the runtime stage copies as a whole. `python3` is the name
# every Python base has (the official image and Debian's own python3 alike).
RUN python3 -m venv /opt/snowsource

# Dependencies first, in their own layer: a change to the source alone reuses it. The versions
# are the pinned ones the test suite ran with; the list is pyproject.toml's, read with tomllib.
COPY pyproject.toml constraints.txt ./
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && /opt/snowsource/bin/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' >requirements.txt \
 && /opt/snowsource/bin/pip install --no-compile -c constraints.txt -r requirements.txt

COPY README.md ./
COPY snowsource ./snowsource
# pip and setuptools only build the package: removed, so the image carries no build tooling.
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && /opt/snowsource/bin/pip install --no-compile --no-deps -c constraints.txt . \
 && /opt/snowsource/bin/pip uninstall --yes pip setuptools \
 && /opt/snowsource/bin/python -m compileall -q /opt/snowsource/lib

# -------------------------------------------------------------------------------- runtime stage
FROM python:${PYTHON_VERSION}-slim

ENV PATH=/opt/snowsource/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SNOWSOURCE_CONFIG=/etc/snowsource/config.yaml \
    HEALTHCHECK_URL=http://127.0.0.1:8083/health/live

RUN groupadd --system --gid 10001 snowsource \
 && useradd --system --uid 10001 --gid snowsource --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin snowsource \
 && mkdir -p /etc/snowsource

COPY --from=build /opt/snowsource /opt/snowsource
# For reference only: the example talks to the bundled emulator; mount your own config.yaml.
COPY config.example.yaml /etc/snowsource/config.example.yaml

USER 10001:10001
WORKDIR /tmp
EXPOSE 8083

# /health/live answers while the process runs (open even with rest.auth.token). Override
# HEALTHCHECK_URL when rest.port differs; with rest.enabled: false, disable the check
# (docker run --no-healthcheck).
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=4)"]

# Last, so a new commit (REVISION) rebuilds no layer above.
# VERSION is kept in step with pyproject.toml's version (the image smoke test compares them),
# SOURCE_URL with its [project.urls] Source (tests/unit/test_project_urls.py).
ARG VERSION=0.1.0
ARG REVISION=""
ARG SOURCE_URL="https://git.example.com/snowsource/snowsource"
LABEL org.opencontainers.image.title="snowsource" \
      org.opencontainers.image.description="Stream ServiceNow tables into Apache Kafka with Kafka Connect-compatible offsets" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0"

ENTRYPOINT ["snowsource"]
CMD ["run", "--config", "/etc/snowsource/config.yaml"]
