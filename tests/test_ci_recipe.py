"""The CI recipe users copy installs this project, pinned, with a CPU torch, and pins every action."""

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "github-actions-audit.yml"
# Names on the package index that belong to other projects: installing them by name is a hazard.
TAKEN = {"moss", "moss-cli"}


def _workflow() -> dict:
    return yaml.safe_load(RECIPE.read_text())


def _steps() -> list[dict]:
    [job] = _workflow()["jobs"].values()
    return job["steps"]


def test_distribution_name_is_not_one_taken_by_another_project():
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name.lower() not in TAKEN
    assert name == "moss-tts-repro"


def test_recipe_installs_moss_from_a_pinned_commit_not_by_name():
    env = _workflow()["env"]
    runs = "\n".join(step.get("run", "") for step in _steps())
    assert "moss-tts-repro @ git+${MOSS_REPO}@${MOSS_COMMIT}" in runs
    assert "MOSS_COMMIT" in env and "[0-9a-f]{40}" in runs  # the job refuses anything but a full commit
    for line in runs.splitlines():
        if "pip install" in line:
            packages = {re.split(r"[<>=@ \[]", arg.strip('"'))[0].lower() for arg in shlex.split(line)}
            assert not packages & TAKEN, line


def test_recipe_installs_torch_from_the_cpu_index_first():
    runs = [step.get("run", "") for step in _steps()]
    install = next(r for r in runs if "moss-tts-repro" in r)
    assert "--index-url" in install and _workflow()["env"]["TORCH_INDEX"].endswith("/whl/cpu")
    assert install.index("torch==") < install.index("moss-tts-repro")


def test_recipe_pins_every_action_to_a_full_commit():
    uses = [step["uses"] for step in _steps() if "uses" in step]
    assert uses, "the recipe uses actions"
    for action in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action


def test_recipe_runs_the_audit_and_publishes_its_reports():
    steps = _steps()
    audit = next(s for s in steps if "moss audit-determinism" in s.get("run", ""))
    assert "--report-dir audit-report" in audit["run"]
    publish = [s for s in steps if s.get("if") == "always()"]
    assert {s["with"].get("report_paths") or s["with"].get("path") for s in publish} == {
        "audit-report/junit.xml",
        "audit-report/",
    }
