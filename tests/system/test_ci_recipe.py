"""The CI recipes users copy install this project, pinned, with a CPU torch, and pin every action;
the server recipe starts a server, waits for its health endpoint with a bounded loop, audits it."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from speech_servers import unused_port  # tests/ is on sys.path

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "github-actions-audit.yml"
SERVER_RECIPE = ROOT / "recipes" / "github-actions-server-audit.yml"
BOTH = pytest.mark.parametrize("recipe", [RECIPE, SERVER_RECIPE], ids=["local", "server"])
# Names on the package index that belong to other projects: installing them by name is a hazard.
TAKEN = {"moss", "moss-cli"}


def _workflow(recipe: Path = RECIPE) -> dict:
    return yaml.safe_load(recipe.read_text())


def _steps(recipe: Path = RECIPE) -> list[dict]:
    [job] = _workflow(recipe)["jobs"].values()
    return job["steps"]


def test_distribution_name_is_not_one_taken_by_another_project():
    name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name.lower() not in TAKEN
    assert name == "moss-tts-repro"


@BOTH
def test_recipe_installs_moss_from_a_pinned_commit_not_by_name(recipe):
    env = _workflow(recipe)["env"]
    runs = "\n".join(step.get("run", "") for step in _steps(recipe))
    assert re.search(r'"moss-tts-repro(\[serve\])? @ git\+\$\{MOSS_REPO\}@\$\{MOSS_COMMIT\}"', runs)
    assert "MOSS_COMMIT" in env and "[0-9a-f]{40}" in runs  # the job refuses anything but a full commit
    for line in runs.splitlines():
        if "pip install" in line:
            packages = {re.split(r"[<>=@ \[]", arg.strip('"'))[0].lower() for arg in shlex.split(line)}
            assert not packages & TAKEN, line


def test_the_docs_install_moss_from_a_pinned_source_never_by_name():
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    installs = [line for doc in docs for line in doc.read_text().splitlines() if re.search(r"pip install .*moss", line)]
    assert installs
    for line in installs:  # the name is not on the package index; an extra is no exception
        assert re.search(r'"moss-tts-repro(\[\w+\])? @ git\+', line) or "moss-cli" in line, line


@BOTH
def test_recipe_installs_torch_from_the_cpu_index_first(recipe):
    runs = [step.get("run", "") for step in _steps(recipe)]
    install = next(r for r in runs if "moss-tts-repro" in r)
    assert "--index-url" in install and _workflow(recipe)["env"]["TORCH_INDEX"].endswith("/whl/cpu")
    assert install.index("torch==") < install.index("moss-tts-repro")


@BOTH
def test_recipe_pins_every_action_to_a_full_commit(recipe):
    uses = [step["uses"] for step in _steps(recipe) if "uses" in step]
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


@BOTH
def test_every_shell_step_parses_as_bash(recipe):
    for step in _steps(recipe):
        if "run" in step:
            checked = subprocess.run(["bash", "-n"], input=step["run"], capture_output=True, text=True)
            assert checked.returncode == 0, (step.get("name"), checked.stderr)


def test_server_recipe_starts_a_server_waits_for_health_with_a_bound_and_audits_it():
    steps = _steps(SERVER_RECIPE)
    runs = [s.get("run", "") for s in steps]
    start = next(i for i, r in enumerate(runs) if "moss serve" in r)
    wait = next(i for i, r in enumerate(runs) if "/health" in r)
    audit = next(i for i, r in enumerate(runs) if "moss audit-determinism" in r)
    assert start < wait < audit
    assert re.search(r"for \w+ in \$\(seq 1 \d+\)", runs[wait]) and "--max-time" in runs[wait]  # bounded
    assert "exit 2" in runs[wait]  # never healthy: the job fails, showing the server's log
    command = runs[audit]
    for option in (
        '--server "$MOSS_SERVER_URL"',
        '--deploy "$MOSS_DEPLOY_FILE"',
        "--junit audit-report/junit.xml",
        "--markdown",
        "--report-dir",
    ):
        assert option in command
    assert '--deploy "$MOSS_DEPLOY_FILE"' in runs[start]  # the stand-in runs the file the audit checks
    assert "secrets.TTS_TOKEN" in steps[audit]["env"]["TTS_TOKEN"] and "echo" not in command  # the token is not shown
    publish = [s for s in steps if s.get("if") == "always()" and "with" in s]
    assert {s["with"].get("report_paths") or s["with"].get("path") for s in publish} == {
        "audit-report/junit.xml",
        "audit-report/",
    }
    assert any("kill" in s.get("run", "") for s in steps if s.get("if") == "always()")  # the server is stopped


@pytest.mark.slow  # a real moss serve process
def test_server_recipe_steps_start_moss_serve_wait_audit_and_stop_it(tmp_path):
    """The recipe's own shell, run here: it starts moss serve, waits for /health, audits it with a
    token header, writes the reports (the token appears nowhere) and stops the server."""
    port = str(unused_port())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "moss").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m moss_cli "$@"\n')
    (bin_dir / "moss").chmod(0o755)
    few = [
        {"id": "a", "text": "Short.", "seed": 3, "max_new_frames": 8},
        {"id": "b", "text": "No seed.", "max_new_frames": 6},
    ]
    (tmp_path / "few.jsonl").write_text("".join(json.dumps(r) + "\n" for r in few))
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "recipes" / "moss_tts_local_tiny.yaml", tmp_path / "deploy" / "moss_tts_local.yaml")
    steps = {s.get("name", ""): s.get("run", "") for s in _steps(SERVER_RECIPE)}
    start = next(run for name, run in steps.items() if name.startswith("Start")).replace("8091", port)
    wait = next(run for name, run in steps.items() if name.startswith("Wait"))
    audit = next(run for name, run in steps.items() if name == "Audit the server")
    audit = audit.replace("moss audit-determinism \\", "moss audit-determinism few.jsonl --stagger-ms 10 \\")
    stop = next(run for name, run in steps.items() if name.startswith("Stop"))
    token = "recipe-token-4321"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "MOSS_SERVER_URL": f"http://127.0.0.1:{port}",
        "MOSS_DEPLOY_FILE": "deploy/moss_tts_local.yaml",
        "TTS_TOKEN": token,
    }
    done = []
    try:
        for run in (start, wait, audit):
            done.append(
                subprocess.run(
                    ["bash", "-eo", "pipefail", "-c", run], cwd=tmp_path, env=env, capture_output=True, text=True
                )
            )
    finally:
        stopped = subprocess.run(["bash", "-c", stop], cwd=tmp_path, env=env, capture_output=True, text=True)
    for step in done:
        assert step.returncode == 0, step.stdout + step.stderr + (tmp_path / "server.log").read_text()
        assert token not in step.stdout + step.stderr
    assert stopped.returncode == 0
    report = tmp_path / "audit-report"
    assert {"junit.xml", "summary.md", "audit.json", "index.html"} <= {p.name for p in report.iterdir()}
    server = json.loads((report / "audit.json").read_text())["server"]
    assert server["deploy_seed"]["checked"] and server["requests"]["b"]["verdict"] == "identical"
    assert all(token not in p.read_text() for p in report.glob("*.*"))
    pid = int((tmp_path / "server.pid").read_text())
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # SIGTERM: it finishes, then exits
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.slow  # two real audits
def test_the_first_run_of_the_audit_recipe_saves_the_baseline_the_next_run_checks(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "moss").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m moss_cli "$@"\n')
    (bin_dir / "moss").chmod(0o755)
    (tmp_path / "few.jsonl").write_text(json.dumps({"id": "a", "text": "Short.", "seed": 3, "max_new_frames": 6}))
    audit = next(s["run"] for s in _steps() if "moss audit-determinism" in s.get("run", ""))
    audit = audit.replace("moss audit-determinism \\", "moss audit-determinism few.jsonl --scenarios repeat \\")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    env["MOSS_GOLDEN"] = _workflow()["env"]["MOSS_GOLDEN"]

    def run() -> subprocess.CompletedProcess:
        command = ["bash", "-eo", "pipefail", "-c", audit]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    first = run()
    assert first.returncode == 0, first.stdout + first.stderr
    saved = tmp_path / "audit-report" / "golden.json"
    assert "this run saves one" in first.stderr and json.loads(saved.read_text())["requests"]["a"]["seed"] == 3
    (tmp_path / env["MOSS_GOLDEN"]).parent.mkdir(parents=True)
    saved.rename(tmp_path / env["MOSS_GOLDEN"])  # committed, as the recipe says
    second = run()
    assert second.returncode == 0, second.stdout + second.stderr
    assert "golden" in second.stdout and "no drift" in second.stdout and not saved.exists()
