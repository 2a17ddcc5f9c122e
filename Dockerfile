# One image, two roles: `grelmicro-sidecar run` (the default command, injected
# next to applications) and `grelmicro-sidecar injector` (the admission webhook).
#
# Build:  docker build -t ghcr.io/grelinfo/grelmicro-sidecar:0.1.0 .
#         (a release: `make release` builds it with buildah into an OCI archive)
#
# The runtime stage holds only the Python runtime, a virtualenv and bytecode; it
# runs as a numeric non-root user (65532, so runAsNonRoot can verify it) and needs
# no writable path in its root filesystem: bytecode is compiled at build time (no
# module is compiled at a start) and the sidecar writes only to its state directory
# (an emptyDir).

FROM python:3.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY sidecar ./sidecar
COPY hack/bytecode.py ./

# The injector's extra (kopf, aiohttp) is installed for the
# injector role; `run` never imports it (sidecar/commands/cli.py loads it lazily).
# Bytecode (hack/bytecode.py): the virtualenv's, checked by hash so that the copy
# below cannot make it stale, and the standard-library modules the commands import,
# which the slim images ship without.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir ".[injector]" \
    && /opt/venv/bin/pip uninstall --yes pip setuptools \
    && /opt/venv/bin/python bytecode.py /opt/venv /opt/stdlib-bytecode

FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="grelmicro-sidecar" \
      org.opencontainers.image.description="Kubernetes leader-election sidecar and its injector" \
      org.opencontainers.image.licenses="MIT"

COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/stdlib-bytecode/ /

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 65532:65532
EXPOSE 4040

ENTRYPOINT ["grelmicro-sidecar"]
CMD ["run"]
