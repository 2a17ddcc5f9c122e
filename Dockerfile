# One image, two roles: `grelmicro-sidecar run` (the default command, injected
# next to applications) and `grelmicro-sidecar injector` (the admission webhook).
#
# Build:  docker build -t grelmicro-sidecar:0.1.0 .
#
# The runtime stage holds only the Python runtime and a virtualenv; it runs as
# a numeric non-root user (65532, so runAsNonRoot can verify it) and needs no
# writable path in its root filesystem: bytecode is compiled at build time and
# the sidecar writes only to its state directory (an emptyDir).

FROM python:3.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY sidecar ./sidecar

# The injector's extra (kopf, aiohttp) is installed for the
# injector role; `run` never imports it (sidecar/commands/cli.py loads it lazily).
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir ".[injector]" \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib

FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="grelmicro-sidecar" \
      org.opencontainers.image.description="Kubernetes leader-election sidecar and its injector" \
      org.opencontainers.image.licenses="MIT"

COPY --from=build /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 65532:65532
EXPOSE 4040

ENTRYPOINT ["grelmicro-sidecar"]
CMD ["run"]
