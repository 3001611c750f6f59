"""What a server audit adds to the reports: each path's verdict (the single route, the streams, the
batch route), each request's, how many requests really were in flight together in each run,
re-sends, and skipped scenarios (terminal, Markdown and the HTML page; the JSON carries the whole
`server` section)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..measures.words import corpus_text
from ..remote.paths import BATCH, PATHS, SINGLE
from ..report import page
from ..report.terminal import print_table
from .runner import AuditResult

STYLE = {"identical": "green", "unseeded": "yellow", "skipped": "yellow", "not audited": "dim"}
PATH_COLUMNS = ("path", "route", "verdict", "seed", "numerics", "requests", "comparisons", "detail")


def style(v: dict) -> str:
    """A verdict's colour: known ones by name; else red where it failed, yellow where it only warns."""
    return STYLE.get(v["verdict"], "red" if v.get("passed") is not True else "yellow")


def status(v: dict) -> str:
    """A request's verdict as the page's row class: pass (identical), fail, or the verdict itself (a warning)."""
    if v["verdict"] == "identical":
        return "pass"
    return v["verdict"] if v.get("passed", v["verdict"] == "unseeded") else "fail"


def _question(v: dict, key: str) -> str:
    answer = (v.get("questions") or {}).get(key)
    return "-" if answer is None else answer["verdict"]


def path_status(v: dict) -> str:
    """A path's verdict as the page's row class: pass, fail, unseeded (a difference that is not a
    failure), or none (skipped, not audited)."""
    if v["passed"] is None:
        return ""
    if not v["passed"]:
        return "fail"
    return "pass" if v["verdict"] == "identical" else v["verdict"]


def path_rows(server: dict, brief: bool = False) -> list[list[str]]:
    """The table path x verdict, one row per path: the detail names the requests that failed on it
    (with their cause where it is not the path's) and where the first did, then, unless `brief`
    (the terminal, whose request table below says it), what that comparison found; with --asr-model, the
    path's word error rates alone and under load."""
    rows = []
    for path, v in server["paths"].items():
        detail = v["detail"]
        if v["failed"]:
            named = ", ".join(
                key if cause == v["verdict"] else f"{key} ({cause})" for key, cause in v["failed"].items()
            )
            detail = f"failed: {named}; first in {v['where']}" + ("" if brief else f": {detail}")
        words = ((v.get("questions") or {}).get("numerics") or {}).get("words") or {}
        if words.get("passed") is not None:  # --asr-model: the path's error rates
            detail = f"{detail}; {corpus_text(words)}" if detail else corpus_text(words)
        answers = [_question(v, "seed"), _question(v, "numerics")]
        rows.append(
            [path, PATHS[path].route, v["verdict"], *answers, str(v["requests"]), str(v["comparisons"]), detail]
        )
    return rows


def notes(server: dict) -> list[str]:
    """What the audit learnt of the server and assumed, one sentence each (every report shows them)."""
    out = [f"Deploy seed: {server['deploy_seed']['note']}."]
    out.append(f"Reference voice: {server['reference_voice']}.")
    out += [f"Sent although vllm-omni drops it: {field}." for field in server["dropped_fields"]]
    single = server["batch_items"][SINGLE.name]
    if single and server["paths"][BATCH.name]["comparisons"]:
        said = "; ".join(f"{key}: {why}" for key, why in single.items())
        out.append(f"Sent as single requests next to the batch call, not as its items: {said}.")
    return out


def _in_flight(run: dict) -> str:
    server = run["max_in_flight_server"]
    return f"{run['max_in_flight_client']}" + (f" (server: {server})" if server is not None else "")


def render_server(console: Console, result: AuditResult) -> None:
    server = result.server
    url = escape(server["url"])
    rows = [
        [*map(escape, row[:2]), f"[{style(v)}]{escape(row[2])}[/]", *map(escape, row[3:])]
        for row, v in zip(path_rows(server, brief=True), server["paths"].values())
    ]
    print_table(console, PATH_COLUMNS, rows, title=f"server {url}: verdict per path", right=PATH_COLUMNS[5:7])
    rows = [
        [escape(key), f"[{style(v)}]{escape(v['verdict'])}[/]", escape(v["detail"])]
        for key, v in server["requests"].items()
    ]
    print_table(console, ("request", "verdict", "detail"), rows, title=f"server {url}: verdict per request")
    rows = [[escape(label), str(run["sent"]), _in_flight(run)] for label, run in server["runs"].items()]
    title = "requests in flight together (most, as this client saw it; the server's own count if sent)"
    print_table(console, ("run", "sent", "in flight"), rows, title=title, right=("sent", "in flight"))
    for scenario, why in server["skipped"].items():
        console.print(f"[yellow]skipped {scenario}:[/] {escape(why)}", highlight=False)
    if server["retries"]:
        console.print(f"[yellow]{len(server['retries'])} re-send(s)[/] after 5xx answers or reset connections")
    console.print(f"codes: {escape(server['codes'])}", highlight=False)
    for line in notes(server):
        console.print(escape(line), highlight=False, soft_wrap=True)


def server_markdown(result: AuditResult) -> list[str]:
    server = result.server
    out = [
        "",
        f"### Server `{server['url']}`",
        "",
        "| " + " | ".join(PATH_COLUMNS) + " |",
        "|---|---|---|---|---|---:|---:|---|",
        *(f"| `{path}` | {route} | {' | '.join(rest)} |" for path, route, *rest in path_rows(server)),
        "",
        "| request | verdict | detail |",
        "|---|---|---|",
    ]
    out += [f"| {key} | {v['verdict']} | {v['detail']} |" for key, v in server["requests"].items()]
    out += ["", "| run | sent | most in flight |", "|---|---:|---:|"]
    out += [f"| {label} | {run['sent']} | {_in_flight(run)} |" for label, run in server["runs"].items()]
    out += [f"- skipped `{scenario}`: {why}" for scenario, why in server["skipped"].items()]
    if server["retries"]:
        out += ["", f"{len(server['retries'])} re-send(s) after 5xx answers or reset connections:"]
        out += [f"- {r['request']} ({r['context']}), attempt {r['attempt']}: {r['reason']}" for r in server["retries"]]
    out += ["", f"Codes: {server['codes']}."]
    out += ["", *(f"- {line}" for line in notes(server))]
    return out


def server_blocks(server: dict) -> list:
    """The HTML page's server section (from the JSON report's `server`)."""
    rows = path_rows(server)
    paths = page.Table(list(PATH_COLUMNS), rows, [path_status(v) for v in server["paths"].values()])
    verdicts = server["requests"]
    requests = page.Table(
        ["request", "verdict", "detail"],
        [[key, v["verdict"], v["detail"]] for key, v in verdicts.items()],
        [status(v) for v in verdicts.values()],
    )
    runs = page.Table(
        ["run", "sent", "most in flight (client)", "most in flight (server)"],
        [
            [
                label,
                run["sent"],
                run["max_in_flight_client"],
                "-" if run["max_in_flight_server"] is None else run["max_in_flight_server"],
            ]
            for label, run in server["runs"].items()
        ],
    )
    blocks: list = [paths, requests, runs, f"Codes: {server['codes']}.", *notes(server)]
    blocks += [f"Skipped {scenario}: {why}" for scenario, why in server["skipped"].items()]
    if server["retries"]:
        blocks.append(f"{len(server['retries'])} re-send(s) after 5xx answers or reset connections (see the JSON).")
    return blocks
