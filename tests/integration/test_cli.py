from pathlib import Path

import pytest
from cli_runs import Drawn, assert_tables_whole, tables_at, write_rows  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.cli.app import app

runner = CliRunner()


def test_help_lists_the_tool():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "MOSS-TTS-Local" in result.output


def test_dash_h_is_help_everywhere():
    for argv in (["-h"], ["synth", "-h"], ["audit-determinism", "-h"], ["config", "show", "-h"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 0 and "Usage: moss" in result.output, (argv, result.output)
        assert result.output == runner.invoke(app, [*argv[:-1], "--help"]).output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("moss ")


def test_threads_option_sets_torch_intra_op_threads(tmp_path):
    import torch

    from moss_cli.config.requests import read_requests  # noqa: F401  (the command validates first)

    request = tmp_path / "one.txt"
    request.write_text("A single short line.\n")
    try:
        result = runner.invoke(
            app, ["synth", str(request), "--out", str(tmp_path / "o"), "--threads", "2", "--dry-run"]
        )
        assert result.exit_code == 0, result.output
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)


def test_no_color_keeps_the_progress_bar(monkeypatch):
    from rich.console import Console

    from moss_cli.cli import common

    monkeypatch.setattr(common, "stderr", Console(stderr=True, force_terminal=True))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert common.interactive()  # colour and progress are different things
    monkeypatch.setenv("CI", "true")
    assert not common.interactive()


def test_help_and_version_do_not_import_torch():
    import subprocess
    import sys

    for argv in (["--version"], ["--help"], ["synth", "--help"], ["audit-determinism", "--help"]):
        code = (
            "import sys; from moss_cli.cli.app import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('torch imported' if 'torch' in sys.modules else 'no torch')"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip().endswith("no torch"), (argv, out[-300:])


def test_an_interrupt_promises_a_resume_only_where_the_command_resumes(tmp_path, monkeypatch):
    import moss_cli.audit.runner
    import moss_cli.jobs.local

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(moss_cli.audit.runner, "run_audit", interrupted)
    monkeypatch.setattr(moss_cli.jobs.local, "synthesize", interrupted)
    request = tmp_path / "one.txt"
    request.write_text("A single short line.\n")
    audit = runner.invoke(app, ["audit-determinism", str(request), "--scenarios", "repeat"])
    synth = runner.invoke(app, ["synth", str(request), "--out", str(tmp_path / "o")])
    assert audit.exit_code == synth.exit_code == 130
    assert "interrupted (signal 2)" in audit.output and "resume" not in audit.output  # audits start over
    assert "run the same command again to resume" in " ".join(synth.output.split())


def test_piped_output_is_drawn_wide_not_at_80_columns():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    command = [sys.executable, "-m", "moss_cli", "config", "show"]
    shown = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    # At 80 columns the table broke its cells mid-word ("moss_cli/assets" / "/deploy-tiny.ya" / "ml:19").
    assert "moss_cli/assets/deploy-tiny.yaml:" in shown and max(map(len, shown.splitlines())) > 80
    narrow = subprocess.run(command, capture_output=True, text=True, env={**env, "COLUMNS": "60"}, check=True).stdout
    assert max(map(len, narrow.splitlines())) <= 60  # COLUMNS still wins


def test_config_show_says_where_audio_fields_count():
    said = " ".join(runner.invoke(app, ["config", "show"], env={"COLUMNS": "200"}).output.split())
    assert "override the audio sampler in moss (local runs, Ray workers and moss serve); vllm-omni drops them" in said
    assert "local runs only" not in said


def test_config_show_at_80_columns_keeps_every_key_value_and_source_whole():
    import json
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "moss_cli", "config", "show", "--deploy", "recipes/moss_tts_local_v1.5.yaml"]
    env = {**os.environ, "COLUMNS": "80"}
    shown = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    values = json.loads(subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout)
    cells = [[key, json.dumps(v["value"]), v["source"]] for key, v in values["values"].items()]
    assert_tables_whole([Drawn(cells, shown)], 80)
    with tables_at(80) as drawn:
        result = runner.invoke(app, ["config", "show", "--deploy", "recipes/moss_tts_local_v1.5.yaml"])
    assert result.exit_code == 0 and len(drawn[0].cells) == 1 + len(values["values"])
    assert_tables_whole(drawn, 80)


def test_synth_dry_run_summary_at_80_columns(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": f"r{i}", "text": "Hello there.", "seed": i} for i in range(3)])
    with tables_at(80) as drawn:
        result = runner.invoke(app, ["synth", str(requests), "--out", str(tmp_path / "o"), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert_tables_whole(drawn, 80)


def _commands(group, path=()):
    import click

    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


@pytest.mark.parametrize("width", [80, 100])
def test_help_at_a_narrow_width_gives_every_description_40_columns_or_more(width):
    """Typer's panels leave a description 17 columns of 80 (the option, its negative form, -h and the
    type take a column each); narrower than they need, help is Click's layout, the description beside
    the option from column 30 at most or below it."""
    from typer.main import get_command

    for path, command in _commands(get_command(app)):
        output = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)}).output
        assert "…" not in output and max(map(len, output.splitlines())) <= width, output
        lines = output.splitlines()
        for param in command.params:
            if param.help:
                names = [*param.opts, *param.secondary_opts, *([param.metavar.lower()] if param.metavar else [])]
                column = _description_column(lines, names, param.help.split()[0])
                assert width - column >= 40, (path, param.opts, output)
    for group in ([], ["config"]):  # each command's first sentence whole, not cut with "..."
        output = " ".join(runner.invoke(app, [*group, "--help"], env={"COLUMNS": str(width)}).output.split())
        listed = output[output.index("Commands") :]
        assert "..." not in listed and "…" not in listed, output
        for name, command in get_command(app).commands.items() if not group else []:
            first = " ".join(command.help.split(".")[0].split())
            assert f"{name} {first}." in output, (name, output)


@pytest.mark.parametrize("width", [80, 200])
def test_every_option_value_and_route_in_help_is_whole_and_copyable(width):
    """Every option's names, every allowed value and every route stand whole on one line (wrapped at spaces
    only), with a placeholder that says what to type: no `<str>`, `<bool>` or `{requests}`, no markup
    escape, nothing cut with "…"."""
    from typer.main import get_command

    from moss_cli.audit.scenarios import SCENARIOS, server_scenarios

    for path, command in _commands(get_command(app)):
        output = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)}).output
        words = set(output.replace(",", " ").replace(";", " ").replace("(", " ").replace(")", " ").split())
        for bad in ("<str>", "<bool>", "<list[str]>", "{", "\\[", "…", "╭"):
            assert bad not in output, (path, bad, output)
        for param in command.params:
            names = (*param.opts, *param.secondary_opts) if param.param_type_name == "option" else (param.metavar,)
            for name in names:
                assert name in words or name in output.split(), (path, name, output)
        if path == ("audit-determinism",):
            assert set(SCENARIOS) | set(server_scenarios()) <= words, output
        assert max(map(len, output.splitlines())) <= max(width, 80), output
    usage = {
        path: runner.invoke(app, [*path, "--help"]).output.splitlines()[0] for path, _ in _commands(get_command(app))
    }
    assert usage[("synth",)] == "Usage: moss synth [OPTIONS] REQUESTS"
    assert usage[("diff",)] == "Usage: moss diff [OPTIONS] A B"
    assert usage[("audit-determinism",)] == "Usage: moss audit-determinism [OPTIONS] [REQUESTS]"


def _description_column(lines: list[str], names: list[str], first: str) -> int:
    """Where the description of the option called one of `names` starts (its first word `first`):
    after a gap of two spaces on the option's line, else on the line below it."""
    import re

    for at, line in enumerate(lines):
        words = re.findall(r"[^\s,│\[\]]+", line)  # an optional argument is [NAME]
        if words and words[0].lower() in names and len(line) - len(line.lstrip(" │")) <= 3:  # not a description's line
            gap = re.search(r"\S\s{2,}(?=\S)", line.rstrip(" │"))
            below = lines[at + 1]
            column = gap.end() if gap else len(below) - len(below.lstrip(" │"))
            assert (line if gap else below)[column:].startswith(first), (names, line, below)
            return column
    raise AssertionError(f"{names[0]} is not in the help")


def test_engine_options_reach_the_library_typed_on_every_typer(tmp_path, monkeypatch):
    """--device, --dtype and --deploy reach the library as its values (text, a Path) from every command
    that takes them. Typer 0.27 leaves ctx.params as click parsed it (text for an Enum or a Path), and
    every such command died there with an AttributeError; CI runs this on Typer 0.27.2
    (scripts/test_dependency_ranges.sh)."""
    pytest.importorskip("fastapi")  # moss serve's extra
    import moss_cli.audit.runner
    import moss_cli.jobs.local
    import moss_cli.serve.server

    seen = []

    def stop(*args, **kwargs):  # the options the command built, then an interrupt: nothing runs
        seen.append(args[-1])
        raise KeyboardInterrupt

    monkeypatch.setattr(moss_cli.jobs.local, "synthesize", stop)
    monkeypatch.setattr(moss_cli.audit.runner, "run_audit", stop)
    monkeypatch.setattr(moss_cli.serve.server, "prepare", stop)
    request = tmp_path / "one.txt"
    request.write_text("A single short line.\n")
    deploy = Path(__file__).parents[2] / "recipes" / "moss_tts_local_tiny.yaml"
    engine = ["--device", "cpu", "--dtype", "float32", "--deploy", str(deploy)]
    for argv in (
        ["synth", str(request), "--out", str(tmp_path / "o"), *engine],
        ["audit-determinism", str(request), "--scenarios", "repeat", *engine],
        ["serve", *engine],
    ):
        result = runner.invoke(app, argv)
        assert result.exit_code == 130, (argv, result.output)
    synth_options = [seen[0], seen[1].synth, seen[2]]
    assert [(o.device, o.dtype, o.deploy) for o in synth_options] == [("cpu", "float32", deploy)] * 3


@pytest.mark.parametrize(
    "argv, start",
    [
        (["synth", "x.txt", "--device", "gpu"], "error: [--device]: "),  # not one of the choices
        (["synth", "x.txt", "--max-batch", "0"], "error: [--max-batch]: "),  # below the option's min=
        (["serve", "--port", "70000"], "error: [--port]: "),  # above its max=
        (["synth"], "error: Missing argument "),
        (["synth", "x.txt", "--bogus"], "error: No such option: --bogus"),
        (["synt"], "error: No such command 'synt'"),
        (["config", "show", "a.yaml", "b.yaml"], "error: Got unexpected extra argument"),
    ],
)
def test_usage_errors_are_one_error_line_like_moss_own_and_exit_2(argv, start):
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()  # no usage block, no box
    assert line.startswith(start) and line.endswith(" -h)"), line


def test_a_bare_group_still_shows_its_help():
    for argv in ([], ["config"]):
        assert "Usage: moss" in runner.invoke(app, argv).output


def test_the_moss_command_prints_a_usage_error_as_one_error_line():
    import subprocess
    import sys

    moss = Path(sys.executable).parent / "moss"  # the console script this environment installed
    result = subprocess.run([moss, "synth", "x.txt", "--dtype", "float8"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: [--dtype]: ") and result.stderr.endswith("(see moss synth -h)\n")
    assert len(result.stderr.splitlines()) == 1, result.stderr
