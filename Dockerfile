# sealflow: multi-stage build on Debian 13 (trixie), whose OpenSSL (3.5) has VAES AES-GCM,
# so the native provider is as fast as the one bundled with `cryptography`.
#   docker build -t sealflow .
#   docker run -p 8080:8080 -v sealflow-data:/data -e SEALFLOW_MASTER_KEY=... sealflow
ARG PYTHON=3.11

FROM python:${PYTHON}-slim-trixie AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The locked dependencies and build requirements, checked against their hashes (docs/DEPLOY.md,
# "Dependencies"); before the sources, so this layer is rebuilt only when a lock changes.
COPY requirements requirements
RUN python -m venv /opt/sealflow \
    && /opt/sealflow/bin/pip install --no-cache-dir --require-hashes \
        -r requirements/build.txt -r requirements/runtime.txt
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY native native
COPY engine engine
COPY service service
# The top-level package and its symlinks to the three folders above (see pyproject.toml).
COPY src src
# The cffi extension and the mypyc-compiled modules (setup.py) are built here, against the
# image's own OpenSSL headers, with the locked setuptools, cffi and mypy: build isolation would
# fetch unpinned ones without checking a hash. mypy and what only it needs are not for the
# running image: uninstalled once the build is done.
RUN /opt/sealflow/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/sealflow/bin/pip uninstall -y mypy mypy-extensions librt pathspec ast-serialize \
    && /opt/sealflow/bin/sealflow selftest

FROM python:${PYTHON}-slim-trixie
RUN groupadd --system --gid 10001 sealflow \
    && useradd --system --uid 10001 --gid sealflow --home-dir /data --shell /usr/sbin/nologin sealflow \
    && install -d -o sealflow -g sealflow -m 0700 /data
COPY --from=build /opt/sealflow /opt/sealflow
ENV PATH=/opt/sealflow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    SEALFLOW_HOST=0.0.0.0 \
    SEALFLOW_PORT=8080 \
    SEALFLOW_DATA_DIR=/data \
    SEALFLOW_DRAIN_SECONDS=5
# The keystore lives here; the master key comes from SEALFLOW_MASTER_KEY or a secret file
# named by SEALFLOW_MASTER_KEY_FILE (for example /run/secrets/sealflow_master_key).
VOLUME ["/data"]
USER sealflow:sealflow
EXPOSE 8080
# `sealflow healthcheck` asks /readyz on the port and scheme `sealflow serve` uses, from the same
# settings (SEALFLOW_PORT, SEALFLOW_TLS_CERT, a file named by SEALFLOW_CONFIG): no curl needed.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["sealflow", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["sealflow"]
CMD ["serve"]
