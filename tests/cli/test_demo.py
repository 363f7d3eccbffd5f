"""``lessonbank demo``: a data dir that cannot be used is a one-line error, before anything is started."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lessonbank.cli.main import cli


def test_a_data_dir_under_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    data_dir = tmp_path / "afile" / "data"
    result = CliRunner().invoke(cli, ["demo", "--model", "0.5b"], env={"LESSONBANK_DATA_DIR": str(data_dir)})
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(f"Error: LESSONBANK_DATA_DIR {data_dir} cannot be used: [Errno 20] Not a "
                                    f"directory: '{data_dir / 'demo'}'"), result.stderr
