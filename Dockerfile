# One image for all three commands — gpu-exporter, gpu-analyzer, gpu-reaper; the Helm chart picks
# the command in each workload's args. Build and publish it, with its SBOM and provenance, from the
# repository root with scripts/build-image.sh (docs/install.md, "The image").
#
# Reproducible from pinned inputs: the base image by digest (a tag can be re-pushed, a digest cannot),
# and every Python package from the hashed locks in requirements/ (scripts/lock.sh writes them from
# pyproject.toml), installed with --require-hashes so a changed or substituted file fails the build.
# Dependabot (.github/dependabot.yml) proposes updates to both.
FROM python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5 AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/ requirements/
# A self-contained virtual environment: the runtime stage copies it and nothing else. Dependencies
# and the build backend come only from the locks; the project itself is built without fetching.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --require-hashes --only-binary :all: -r requirements/image.txt \
 && /opt/venv/bin/pip install --require-hashes -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY common/ common/
COPY exporter/ exporter/
COPY analyzer/ analyzer/
COPY reaper/ reaper/
COPY simulation/ simulation/
COPY cli/ cli/
RUN /opt/venv/bin/pip install --no-deps --no-build-isolation . \
 && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# A numeric non-root user, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# gpu-exporter's /metrics and /healthz.
EXPOSE 9400
CMD ["gpu-reaper", "--help"]
