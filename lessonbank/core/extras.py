"""What to install when a part of lessonbank needs an extra the light install leaves out."""

from __future__ import annotations

from lessonbank.core.exceptions import ConfigurationError

# top-level module -> the extra that brings it
EXTRA_OF = {
    "celery": "worker", "kombu": "worker", "openai": "worker", "httpx": "worker", "qdrant_client": "worker",
    "qdrant_edge": "worker", "fastembed": "worker", "onnxruntime": "worker", "flower": "flower",
    "matplotlib": "report", "prometheus_client": "metrics",
}


def missing_extra(error: ModuleNotFoundError, what: str) -> ConfigurationError:
    """A ConfigurationError saying that ``what`` needs an extra that is not installed, and which one."""
    module = (error.name or "").split(".")[0]
    extra = EXTRA_OF.get(module, "worker")
    return ConfigurationError(f"{what} needs lessonbank's {extra!r} extra ({module or 'a module'} is not installed): "
                              f"pip install 'lessonbank[{extra}]'")
