"""The package's layers only import downwards, so each stage of the data flow can change alone:
cli and the api facade -> job/audit -> scaleout -> pipeline -> engine/io/config -> model -> plain values."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "moss_cli"
LAYERS = {
    "cli": 7,
    "api": 7,  # the Python API: a public face over model/ and engine/ that nothing inside imports
    "jobs": 6,  # moss synth as a job: local, through a server, on Ray workers
    "audit": 6,
    "diff": 6,
    "bench": 6,
    "serve": 6,  # moss serve: the speech API over one running engine
    "scaleout": 5,  # Ray: the cluster, workers and dispatch that jobs/ray.py and audit/ray_executor.py use
    "pipeline": 4,
    "report": 4,  # what the audit's and diff's reports share: the HTML page, report files
    "remote": 4,  # the speech-API client: requests in, audio out (the pipeline's counterpart for a server)
    "speech_api": 4,
    "engine": 3,
    "io": 3,
    "measures": 3,  # where audio is measured (waveform, speech) and the one rule of what passes at a level
    "config": 3,
    "model": 2,
    "assets": 2,
    "errors": 1,
    "validation": 1,
    "numerics": 1,  # every place batch invariance is enforced: kernels, attention, tiles, probes, layouts
    "sampling_params": 1,
    "threads": 1,
    "device": 1,
    "interrupts": 1,
    "vllm_omni": 1,  # what vllm-omni 0.30.0 does with MOSS-TTS-Local requests, as plain data
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "assets" or relative.name == "__main__.py":
            continue
        yield relative, ast.parse(path.read_text(), str(path))


def _top(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def _imported_tops(relative: Path, tree: ast.AST):
    """Top-level moss_cli names a module imports (relative imports resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(relative.parts[:-1])[: len(relative.parts) - node.level]
            parts = base + (node.module.split(".") if node.module else [])
            names = [parts[0]] if parts else [alias.name for alias in node.names]
            yield from (n for n in names if n != "__version__")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("moss_cli."):
            yield node.module.split(".")[1]


def test_no_module_imports_a_higher_layer():
    upward = []
    for relative, tree in _modules():
        if relative.name == "__init__.py" and len(relative.parts) == 1:
            continue  # the package's lazy facade
        mine = LAYERS[_top(relative)]
        for top in _imported_tops(relative, tree):
            if top in LAYERS and LAYERS[top] > mine:
                upward.append(f"{relative} imports {top}")
    assert not upward


def test_the_engine_knows_nothing_of_files_or_codec_streaming():
    for relative, tree in _modules():
        if relative.parts[0] == "engine":
            assert not {"io", "pipeline", "jobs", "audit", "cli"} & set(_imported_tops(relative, tree)), relative


def test_no_module_imports_another_modules_private_names():
    """A file holds one concept whatever its length; what it keeps private (a leading underscore)
    stays inside it, so a concept cannot leak across files."""
    leaks = []
    for relative, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("moss_cli")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                leaks += [f"{relative} imports {node.module}.{name}" for name in private]
    assert not leaks


def _module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["moss_cli", *parts])


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(relative: Path, tree: ast.AST):
    """Every moss_cli module a module imports, at module level or inside a function, type-only
    imports included (`from .pkg import name` names the submodule where `name` is one)."""
    package = _module_name(relative).split(".")
    if relative.name != "__init__.py":
        package.pop()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            targets = [f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names]
        else:
            continue
        yield from (t for t in targets if t.split(".")[0] == "moss_cli" and _is_module(t))


def test_no_import_cycles():
    graph = {_module_name(relative): set(_imported_modules(relative, tree)) for relative, tree in _modules()}
    cycles, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(" -> ".join(path[path.index(module) :] + [module]))
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not cycles


def test_nothing_inside_the_package_imports_the_public_api():
    """`moss_cli.api` is a face for callers; the package loads and generates through model/ and
    engine/ itself (only the package's lazy `__init__` hands the face out)."""
    users = [
        str(relative)
        for relative, tree in _modules()
        if relative != Path("__init__.py") and "moss_cli.api" in set(_imported_modules(relative, tree))
    ]
    assert not users


def test_no_serving_path_is_named_outside_its_record():
    """A serving path's name is written once, in remote/paths.py: audit/, bench/ and cli/ read PATHS. The
    word "batch" is also the local bench's batch size (its --batch option and table column), not the route."""
    import ast
    from pathlib import Path

    import moss_cli
    from moss_cli.remote.paths import PATHS

    root = Path(moss_cli.__file__).parent
    batch_size = {Path("bench/local_report.py"), Path("cli/bench.py")}
    named = []
    for folder in ("audit", "bench", "cli"):
        for file in sorted((root / folder).rglob("*.py")):
            where = file.relative_to(root)
            for node in ast.walk(ast.parse(file.read_text())):
                if isinstance(node, ast.Constant) and node.value in PATHS:
                    if not (node.value == "batch" and where in batch_size):
                        named.append(f"{where}:{node.lineno}: {node.value!r}")
    assert not named, named


LONGEST_FUNCTION = 80  # lines; a longer rule is a data table (docs/architecture.md)


def test_no_function_runs_over_80_lines():
    """A function a newcomer reads in one screen: the longer ones were split along their steps, and the
    rules that are data are tables (`SAMPLING_RULES`, `TOKEN_DEFAULTS`, the option groups)."""
    long = []
    for relative, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{relative}:{node.lineno} {node.name}: {lines} lines")
    assert not long, long


def test_every_command_is_declared_one_way():
    """Each command's own options are `Annotated` aliases in its signature (no inline `typer.Option`), and
    its option groups come from `with_options` (docs/architecture.md, "How a command is declared")."""
    inline = []
    for relative, tree in _modules():
        if relative.parts[0] != "cli":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for arg in node.args.args + node.args.kwonlyargs:
                    if arg.annotation is not None and (
                        "typer.Option" in ast.unparse(arg.annotation) or "typer.Argument" in ast.unparse(arg.annotation)
                    ):
                        inline.append(f"{relative}:{node.lineno} {node.name}({arg.arg})")
    assert not inline, inline
