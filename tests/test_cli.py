from typer.testing import CliRunner

from moss_cli.cli.app import app

runner = CliRunner()


def test_help_lists_the_tool():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "MOSS-TTS-Local" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("moss ")
