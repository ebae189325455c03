# One image for all three commands — gpu-exporter, gpu-analyzer, gpu-reaper; the Helm chart picks
# the command in each workload's args. Build from the repository root:
#   docker build -t registry.example.com/kube-gpu-reaper:0.1.0 .
#
# The base is pinned to an exact Python and Debian release. For reproducible builds also pin its
# digest (python:3.11.11-slim-bookworm@sha256:...) and let a bot such as Renovate bump it.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common/ common/
COPY exporter/ exporter/
COPY analyzer/ analyzer/
COPY reaper/ reaper/
COPY simulation/ simulation/
COPY cli/ cli/
# A self-contained virtual environment: the runtime stage copies it and nothing else.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install . \
 && /opt/venv/bin/pip uninstall --yes pip setuptools wheel

FROM ${PYTHON_IMAGE}
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
