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


def test_threads_option_sets_torch_intra_op_threads(tmp_path):
    import torch

    from moss_cli.config.requests import read_requests  # noqa: F401  (the command validates first)

    request = tmp_path / "one.txt"
    request.write_text("A single short line.\n")
    try:
        result = runner.invoke(app, ["synth", str(request), "--out", str(tmp_path / "o"), "--threads", "2",
                                     "--dry-run"])
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
