"""How a MossError names where the problem is: file:line [field]: message, the field shown once."""

import pytest

from moss_cli.errors import MossError
from moss_cli.remote.settings import ServerOptions


@pytest.mark.parametrize(
    "message, where, shown",
    [
        ("must be > 0, got 0", {"field": "--timeout"}, "[--timeout]: must be > 0, got 0"),
        ("--timeout: must be > 0, got 0", {"field": "--timeout"}, "--timeout: must be > 0, got 0"),
        ("--workers only apply with --ray", {"field": "--workers"}, "--workers only apply with --ray"),
        ("n_vq must be positive", {"file": "c.json", "field": "n_vq"}, "c.json: n_vq must be positive"),
        ("expected a number", {"file": "c.json", "line": 3, "field": "n_vq"}, "c.json:3 [n_vq]: expected a number"),
        # another name that merely starts with the field's is no mention of it
        ("--ray-address is unreachable", {"field": "--ray"}, "[--ray]: --ray-address is unreachable"),
        ("stages[1] must be a mapping", {"field": "stages"}, "[stages]: stages[1] must be a mapping"),
        ("no field", {}, "no field"),
    ],
)
def test_the_field_is_shown_once(message, where, shown):
    assert MossError(message, **where).describe() == shown


def test_a_server_option_out_of_range_names_the_option_once():
    with pytest.raises(MossError) as err:
        ServerOptions(url="http://127.0.0.1:9", timeout_s=0)
    assert err.value.describe() == "--timeout: must be > 0, got 0"
    assert err.value.field == "--timeout"  # still there for whoever reads it
