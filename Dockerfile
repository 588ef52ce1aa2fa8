# The service image: CPU-only, non-root, the application started by default.
#   docker build -t imagegen .   (--build-arg TORCH_INDEX_URL=<a CPU wheel index>: optional)
# requirements/base.txt pins torch's CPU build, from pip's own sources or else PyTorch's CPU
# wheel index, never replaced by the CUDA one; see docs/operations.md, "Container image".
FROM python:3.11-slim-bookworm

ARG TORCH_INDEX_URL
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BIND=0.0.0.0:8000 \
    GUNICORN_THREADS=16 \
    WORKER_METRICS_PORT=9100 \
    MODEL_DIR=/models \
    DOWNLOAD_CACHE_DIR=/tmp/download-cache \
    HF_HOME=/tmp/hf-home \
    DATA_DIR=/tmp/data

# nginx reads each request whole, with deadlines, before gunicorn's threads see it
# (config/front_proxy.py); its packaged default site is removed: it only proxies. Not pinned:
# bookworm's security updates replace the version, and a pin would stop the build then.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx \
    && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/default /var/www/html

WORKDIR /app
COPY requirements/base.txt requirements/base.txt
COPY scripts/install_requirements scripts/install_requirements
RUN scripts/install_requirements python -r requirements/base.txt

COPY pyproject.toml manage.py ./
COPY scripts/start scripts/start
COPY config/ config/
COPY core/ core/
COPY todos/ todos/
COPY apikeys/ apikeys/
COPY imagegen/ imagegen/

RUN useradd --create-home --uid 10001 app \
    && mkdir -p /models \
    && chown app:app /models
USER 10001:10001

EXPOSE 8000
# A worker (ROLE=worker) serves no HTTP: its liveness is its heartbeat in Redis.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; os.environ.get('ROLE', 'web') == 'worker' or urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
# ROLE=web (default): nginx on BIND in front of gunicorn with the application (FRONT_PROXY);
# ROLE=worker: manage.py run_worker.
CMD ["scripts/start"]
