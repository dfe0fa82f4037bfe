"""Build the documentation site: docs/ plus the references generated from the code.

    .venv/bin/python scripts/build_docs.py                  # the site in ./site
    .venv/bin/python scripts/build_docs.py --site-dir DIR   # elsewhere
    .venv/bin/python scripts/build_docs.py --only-generate DIR   # just the generated pages

The API reference comes from the app's OpenAPI document, the CLI reference from the CLI
itself (Typer's ``utils docs``), the settings reference from the settings registry. They
are written into a copy of docs/ (the checkout is never touched), and MkDocs builds the
copy with ``--strict``: a broken link or a page missing from the nav fails the build. Before
that, the pages' statements are checked against the code (``check_statements``): a setting
the registry lacks, a manifest of a kind that does not exist, or a feature said not to ship
fails the build too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
GENERATED = "reference"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


# --------------------------------------------------------------------------- API (OpenAPI)


def openapi_document(scratch: Path) -> dict[str, Any]:
    """The document the real app serves at /openapi.json (on a scratch SQLite store)."""
    from virtplane.api.app import create_app
    from virtplane.api.context import ApiContext
    from virtplane.store.settings import Settings
    from virtplane.store.store import Store, sqlite_url

    store = Store(sqlite_url(scratch / "docs.db"))
    try:
        store.migrate()
        document: dict[str, Any] = create_app(ApiContext(store=store, settings=Settings(store))).openapi()
        return document
    finally:
        store.close()


def _cell(text: Any) -> str:
    """Text for a Markdown table cell: one line, no bare pipes."""
    return " ".join(str(text if text is not None else "").split()).replace("|", "\\|") or "-"


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref")
    if ref:
        return str(ref).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    return str(schema.get("type", "object"))


def api_markdown(document: dict[str, Any]) -> str:
    lines = [
        "# API reference",
        "",
        f"Generated from the OpenAPI document of virtplane {document['info']['version']} "
        "(the server serves it at `/openapi.json`, and an interactive view at `/docs`; "
        "[openapi.json](openapi.json) is this one).",
        "",
        "Every request but `/healthz` and `/metrics` needs `Authorization: Bearer TOKEN`. Every "
        'error is JSON `{"reason": ..., "message": ...}` (schema `ErrorBody`): `reason` is for '
        "scripts, `message` for people. Which errors an operation can answer is listed with it: "
        "401 without a valid token, 403 when the token's role may not write, 404 when the named "
        "object does not exist, 409 on a conflict with the stored state, 422 on invalid input.",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in document["paths"].items():
        for method in HTTP_METHODS:
            if method in operations:
                operation = operations[method]
                by_tag.setdefault((operation.get("tags") or ["Other"])[0], []).append(
                    (path, method, operation)
                )
    for tag, operations in by_tag.items():
        lines += [f"## {tag}", ""]
        for path, method, operation in operations:
            lines += [f"### `{method.upper()} {path}`", ""]
            summary = operation.get("summary")
            if summary:
                lines += [summary, ""]
            if operation.get("description"):
                lines += [operation["description"].strip(), ""]
            parameters = operation.get("parameters") or []
            if parameters:
                lines += ["| parameter | in | required | description |", "|---|---|---|---|"]
                lines += [
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                    f"{_cell(p.get('description') or _schema_name(p.get('schema', {})))} |"
                    for p in parameters
                ]
                lines.append("")
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                lines += [f"Body: `{_schema_name(body.get('schema', {}))}`", ""]
            lines += ["| status | meaning |", "|---|---|"]
            lines += [
                f"| {status} | {_cell(answer.get('description'))} |"
                for status, answer in sorted(operation.get("responses", {}).items())
            ]
            lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- kinds (fields)


def kinds_markdown(document: dict[str, Any]) -> str:
    """Every field of every kind, from the OpenAPI document's schemas (the walker is the one
    ``virtplane explain`` uses on the models' own schema)."""
    from virtplane.cli.fields import NO_DEFAULT, Field, field_at, walk
    from virtplane.cli.kinds import KINDS

    defs = document["components"]["schemas"]
    lines = [
        "# Kinds: every field",
        "",
        "Generated from the schemas of the OpenAPI document. `virtplane explain KIND.field.path` "
        "shows the same for one field, offline (`virtplane explain vm.spec.nics`). Every kind "
        "has `apiVersion: virtplane.io/v1`, `kind`, `metadata`, `spec` and `status`; `spec` is "
        "what you write, `status` what the control plane observed.",
        "",
    ]

    def table(root: Field) -> list[str]:
        rows = ["| field | type | default | allowed | description |", "|---|---|---|---|---|"]
        for field in walk(root):
            rows.append(
                f"| `{field.path}`{' (required)' if field.required else ''} | {_cell(field.type)} | "
                f"{_cell('' if field.default == NO_DEFAULT else field.default)} | "
                f"{_cell(', '.join(field.allowed))} | {_cell(field.description)} |"
            )
        return [*rows, ""]

    lines += ["## metadata (every kind)", "", *table(field_at(defs["Metadata"], defs, ""))]
    for info in KINDS:
        if info.kind not in defs:  # not served as an object (settings are values by key)
            continue
        kind = field_at(defs[info.kind], defs, "")
        lines += [f"## {info.kind}", "", f"`virtplane explain {info.short}`", ""]
        for part in kind.children:
            if part.name in ("spec", "status"):
                lines += [f"### {part.name}", "", *table(part)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI (Typer)


def cli_markdown() -> str:
    """Typer's own Markdown of the CLI; the epilogs' indented examples become code blocks."""
    done = subprocess.run(
        [sys.executable, "-m", "typer", "virtplane.cli.main", "utils", "docs", "--name", "virtplane"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = done.stdout.replace("# `virtplane`", "# CLI reference: `virtplane`", 1)
    out: list[str] = []
    in_block = False
    for line in text.splitlines():
        indented = line.startswith("  ") and not line.lstrip().startswith("*")
        if indented and not in_block:
            out += ["", "```text"]
            in_block = True
        elif not indented and in_block:
            out += ["```", ""]
            in_block = False
        out.append(line[2:] if indented else line)
    if in_block:
        out.append("```")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)) + "\n"


# --------------------------------------------------------------------------- settings


def settings_markdown() -> str:
    from virtplane.domain.settings import REGISTRY

    lines = [
        "# Settings reference",
        "",
        "Generated from the settings registry. Read them with `virtplane settings get`, change "
        "them (admin) with `virtplane settings set KEY VALUE`; a setting whose scope is "
        "`host` or `cluster` can also be set for one host or cluster.",
        "",
        "| key | type | default | allowed | scope | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for key, setting in sorted(REGISTRY.items()):
        allowed = ", ".join(str(a) for a in setting.allowed) if setting.allowed else ""
        if setting.minimum is not None or setting.maximum is not None:
            bounds = f"{setting.minimum if setting.minimum is not None else ''} .. "
            bounds += f"{setting.maximum if setting.maximum is not None else ''}"
            allowed = f"{allowed} {bounds}".strip()
        lines.append(
            f"| `{key}` | {setting.type.value} | `{json.dumps(setting.default)}` | {_cell(allowed)} | "
            f"{setting.scope.value} | {_cell(setting.description)} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- statements


SETTING_NAME = re.compile(r"`((?:controller|host|migration|vm)(?:\.[a-z0-9_]+)+)(\.\*)?`")
"""A backticked dotted name in a settings namespace; ``vm.spec.x`` is a field, not a setting."""
KIND_LINE = re.compile(r"^kind:\s*([A-Za-z]+)", re.MULTILINE)  # a manifest's own kind, not spec.kind
UNSHIPPED = re.compile(
    r"not part of this release|\bin progress\b|until it lands|not (?:yet )?implemented", re.I
)
"""How a page says a feature does not ship: the docs describe what ships, plans live in issues."""


def check_statements(text: str, where: str) -> list[str]:
    """What ``text`` (a page of Markdown) states that the code contradicts: a setting that is
    not in the registry, a manifest's kind that does not exist, a feature said not to ship."""
    from virtplane.domain.resources.registry import KIND_BY_NAME
    from virtplane.domain.settings import REGISTRY

    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in SETTING_NAME.finditer(line):
            name, wildcard = match.group(1), match.group(2)
            if name.split(".")[1] in ("spec", "status", "metadata"):
                continue
            known = any(k.startswith(name + ".") for k in REGISTRY) if wildcard else name in REGISTRY
            if not known:
                problems.append(
                    f"{where}:{number}: `{match.group(0).strip('`')}` is not a setting of the registry"
                )
        if UNSHIPPED.search(line):
            problems.append(f"{where}:{number}: says a feature does not ship: {line.strip()!r}")
    for block in re.findall(r"^```ya?ml\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        for kind in KIND_LINE.findall(block):
            if kind not in KIND_BY_NAME:
                problems.append(f"{where}: a manifest of kind {kind}, which does not exist")
    return problems


def check_commands(text: str, where: str) -> list[str]:
    """Each backticked ``virtplane ...`` names commands and options the CLI has (arguments and
    placeholders in capitals are not checked)."""
    import typer.main

    from virtplane.cli.main import app

    root = typer.main.get_command(app)
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        for quoted in re.findall(r"`virtplane ([^`]+)`", line):
            command: Any = root  # typer's own (vendored) click: a group has .commands
            for token in quoted.split():
                options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
                if token.startswith("-"):
                    if token.split("=")[0] not in options:
                        problems.append(f"{where}:{number}: `virtplane {quoted}`: no option {token}")
                    continue
                if not hasattr(command, "commands"):
                    continue  # the command's arguments (its options are checked above)
                if not re.fullmatch(r"[a-z][a-z|-]*", token):
                    break  # a placeholder for a command
                missing = [name for name in token.split("|") if name not in command.commands]
                if missing:
                    problems.append(f"{where}:{number}: `virtplane {quoted}`: no command {' '.join(missing)}")
                    break
                command = command.commands[token.split("|")[0]]
    return problems


def check_docs(docs_dir: Path) -> list[str]:
    return [
        problem
        for page in sorted(docs_dir.rglob("*.md"))
        for check in (check_statements, check_commands)
        for problem in check(page.read_text(encoding="utf-8"), str(page.relative_to(docs_dir)))
    ]


# --------------------------------------------------------------------------- the site


def generate(docs_dir: Path, scratch: Path) -> None:
    """Write the generated reference pages under ``docs_dir/reference``."""
    out = docs_dir / GENERATED
    out.mkdir(parents=True, exist_ok=True)
    document = openapi_document(scratch)
    (out / "openapi.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out / "api.md").write_text(api_markdown(document), encoding="utf-8")
    (out / "kinds.md").write_text(kinds_markdown(document), encoding="utf-8")
    (out / "cli.md").write_text(cli_markdown(), encoding="utf-8")
    (out / "settings.md").write_text(settings_markdown(), encoding="utf-8")


def build(site_dir: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:  # a test extra: serve's install leaves it out
        sys.exit("MkDocs is not installed: ./bin/test installs it, or .venv/bin/pip install -e '.[test]'")
    with tempfile.TemporaryDirectory(prefix="virtplane-docs-") as tmp:
        work = Path(tmp)
        docs = work / "docs"
        shutil.copytree(ROOT / "docs", docs)
        problems = check_docs(docs)
        if problems:
            sys.exit("the docs state what the code contradicts:\n" + "\n".join(problems))
        generate(docs, work)
        config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
        config["docs_dir"] = str(docs)
        config["site_dir"] = str(site_dir.resolve())
        (work / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(work / "mkdocs.yml")],
            check=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site")
    parser.add_argument(
        "--only-generate", type=Path, metavar="DIR", help="write the generated pages into DIR"
    )
    parser.add_argument(
        "--check-only", action="store_true", help="only check the pages' statements against the code"
    )
    args = parser.parse_args()
    if args.check_only:
        problems = check_docs(ROOT / "docs")
        sys.exit("\n".join(problems) if problems else None)
    if args.only_generate:
        with tempfile.TemporaryDirectory() as scratch:
            generate(args.only_generate, Path(scratch))
        return
    build(args.site_dir)


if __name__ == "__main__":
    main()
