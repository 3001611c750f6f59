"""Every numeric option of every command refuses NaN, an infinity and a value far outside its range
as it is parsed: exit 2, naming the option and its range, before anything loads or is sent."""

import re

import pytest
import typer
from typer.testing import CliRunner

from moss_cli.audit.options import AuditOptions
from moss_cli.cli.app import app
from moss_cli.errors import MossError
from moss_cli.remote.settings import ServerOptions

runner = CliRunner()
ARGUMENTS = {"synth": ["requests.jsonl"], "diff": ["a", "b"]}  # the commands' required arguments
INFINITY_MEANS_SOMETHING = {("bench", "--request-rate")}  # inf: back to back


def _numeric_options() -> list[tuple[str, str, type]]:
    """(command, option, int or float) for every numeric option of every command, found from the
    commands themselves, so an option added later is checked too."""
    found = []
    for name, command in typer.main.get_command(app).commands.items():
        for param in getattr(command, "params", []):
            kind = _kind(param)
            if kind in (int, float) and param.param_type_name == "option":
                found.append((name, param.opts[0], kind))
    return found


def _kind(param) -> type | None:
    """An option's value type: Typer 0.29 describes it (`type_descriptor`), earlier releases hand
    click a type (`type`), named "integer" by click and "int" by the click that Typer 0.27 carries."""
    if getattr(param, "type_descriptor", None) is not None:
        return param.type_descriptor.annotation
    return {"integer": int, "int": int, "float": float}.get(param.type.name)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _run(command: str, option: str, value: str) -> tuple[int, str]:
    result = runner.invoke(app, [command, *ARGUMENTS.get(command, []), option, value])
    return result.exit_code, _one_line(result.output)


NUMERIC = _numeric_options()


def test_the_commands_numeric_options_are_all_found():
    options = {(command, option) for command, option, _ in NUMERIC}
    assert {("audit-determinism", "--stagger-ms"), ("audit-determinism", "--min-snr-db"), ("diff", "--min-snr-db")} <= (
        options
    )
    assert {("synth", "--timeout"), ("serve", "--request-timeout"), ("bench", "--duration")} <= options
    assert len(NUMERIC) >= 30


@pytest.mark.parametrize("command, option, kind", NUMERIC, ids=[f"{c}{o}" for c, o, _ in NUMERIC])
def test_nan_inf_and_absurd_values_are_refused_naming_the_option_and_its_range(command, option, kind):
    values = ["1000000000000", "-1000000000000"]
    if kind is float:
        values += ["nan"] + ([] if (command, option) in INFINITY_MEANS_SOMETHING else ["inf", "1e400"])
    for value in values:
        code, output = _run(command, option, value)
        assert code == 2, (value, output)
        assert output.startswith(f"error: [{option}]: "), (value, output)  # one line, moss's style
        assert re.search(r"(from|above) -?[\d.]+ (to|and at most) [\d.]+", output), (value, output)
        assert "Traceback" not in output


def test_infinity_where_it_means_something_passes_the_option_check():
    code, output = _run("bench", "--request-rate", "inf")  # then: --request-rate only with --server
    assert code == 2 and "only with --server" in output and "must be" not in output


@pytest.mark.parametrize("option, value", [("--batch", "0,8"), ("--batch", "1,100000")])
def test_comma_separated_numbers_are_held_to_the_same_range(option, value):
    code, output = _run("bench", option, value)
    assert code == 2 and f"[{option}]: expected comma-separated integers from 1 to 4096, got '{value}'" in output


def test_a_stagger_longer_than_the_timeout_is_refused_before_anything_is_sent():
    """A request sent later than --timeout after another overlaps nothing of it."""
    args = ["audit-determinism", "--server", "http://127.0.0.1:9", "--stagger-ms", "2000", "--timeout", "1"]
    result = runner.invoke(app, args)
    output = _one_line(result.output)
    assert result.exit_code == 2 and "[--stagger-ms]: must be from 0 to --timeout (1000 ms), got 2000" in output
    assert "cannot connect" not in output
    with pytest.raises(MossError, match="--stagger-ms"):
        AuditOptions(server=ServerOptions("http://127.0.0.1:9", timeout_s=1.0), stagger_s=float("nan"))
    assert AuditOptions(server=ServerOptions("http://127.0.0.1:9", timeout_s=1.0), stagger_s=1.0).stagger_s == 1.0
