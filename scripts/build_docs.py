"""Build the documentation site: docs/ plus the references generated from the code.

    .venv/bin/python scripts/build_docs.py                  # the site in ./site
    .venv/bin/python scripts/build_docs.py --site-dir DIR   # elsewhere
    .venv/bin/python scripts/build_docs.py --only-generate DIR   # just the generated pages

The API reference comes from the app's OpenAPI document, the CLI reference from the CLI
itself (Typer's ``utils docs``), the settings reference from the settings registry. They
are written into a copy of docs/ (the checkout is never touched), and MkDocs builds the
copy with ``--strict``: a broken link or a page missing from the nav fails the build.
"""

from __future__ import annotations

import argparse
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


# --------------------------------------------------------------------------- the site


def generate(docs_dir: Path, scratch: Path) -> None:
    """Write the generated reference pages under ``docs_dir/reference``."""
    out = docs_dir / GENERATED
    out.mkdir(parents=True, exist_ok=True)
    document = openapi_document(scratch)
    (out / "openapi.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out / "api.md").write_text(api_markdown(document), encoding="utf-8")
    (out / "cli.md").write_text(cli_markdown(), encoding="utf-8")
    (out / "settings.md").write_text(settings_markdown(), encoding="utf-8")


def build(site_dir: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="virtplane-docs-") as tmp:
        work = Path(tmp)
        docs = work / "docs"
        shutil.copytree(ROOT / "docs", docs)
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
    args = parser.parse_args()
    if args.only_generate:
        with tempfile.TemporaryDirectory() as scratch:
            generate(args.only_generate, Path(scratch))
        return
    build(args.site_dir)


if __name__ == "__main__":
    main()
