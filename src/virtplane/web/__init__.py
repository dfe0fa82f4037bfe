"""The web dashboard (DESIGN.md §8): a single page of plain HTML, JavaScript and CSS.

The page itself needs no token: it asks the operator for one and then calls the
JSON API with ``Authorization: Bearer``. Everything ships in the package
(``web/static``); nothing is fetched from elsewhere.

Routes: ``/`` and ``/ui`` redirect to ``/ui/``, which is ``index.html``;
``/ui/static/{file}`` serves the files next to it but one, ``vocabulary.js``: the lists the page
offers (run policies, maintenance strategies), written from the domain's enums when it loads, so
that the page has no copy of them. ``/ui/static/vendor/{file}`` serves the
third-party files shipped with them (xterm.js for the console, Swagger UI for ``/docs``), and
``/ui/static/vendor/novnc/{path}`` noVNC's ES modules (the screen), the one vendored tree.
``/docs`` is the API reference (Swagger UI over ``/openapi.json``), under the same policy:
FastAPI's own page loads Swagger UI from a CDN and starts it with an inline script.
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from virtplane.domain.host_states import COUNTED_HOST_STATES, MAINTENANCE_STATES
from virtplane.domain.names import WEB_ASSET
from virtplane.domain.operations import APPLICABLE
from virtplane.domain.phases import COUNTED_PHASES, LIVE_PHASES
from virtplane.domain.resources import OperationPhase, VirtualMachineSpec
from virtplane.domain.vocabulary import MaintenanceStrategy, RunPolicy, strategy_meaning

STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDOR_DIR = STATIC_DIR / "vendor"
NOVNC_DIR = VENDOR_DIR / "novnc"

_MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

# The page runs only its own script and talks only to its own origin: even a
# rendering mistake could not run a script that a hostile name smuggled in.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # the files change with the package; revalidate instead of serving a stale script
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def vocabulary_module() -> str:
    """``vocabulary.js``: the page's lists, from the enums (tests/test_vocabulary.py reads it back)."""
    lists = {
        "RUN_POLICIES": [policy.value for policy in RunPolicy],
        "DEFAULT_RUN_POLICY": VirtualMachineSpec.model_fields["run_policy"].default.value,
        "STRATEGIES": [[s.value, strategy_meaning(s)] for s in MaintenanceStrategy],
        # the phases where the server takes each operation, and opens a console or a screen
        "OPERATION_PHASES": {
            op.value: sorted(p.value for p in rule.phases) for op, rule in APPLICABLE.items()
        },
        "CONSOLE_PHASES": sorted(p.value for p in LIVE_PHASES),
        "MAINTENANCE_HOST_STATES": sorted(s.value for s in MAINTENANCE_STATES),
        "OPERATION_STATES": [p.value for p in OperationPhase if p is not OperationPhase.SUPERSEDED],
        "FINISHED_OPERATION_STATES": [p.value for p in OperationPhase if p.finished],
        # the host states and VM phases whose counts show even at zero, in this order
        "HOST_STATES": [s.value for s in COUNTED_HOST_STATES],
        "VM_PHASES": [p.value for p in COUNTED_PHASES],
    }
    lines = [f"export const {name} = {json.dumps(value)};" for name, value in lists.items()]
    return (
        "// Written by virtplane.web from the domain's enums and tables: edit those, not this.\n"
        + "\n".join(lines)
        + "\n"
    )


VOCABULARY_JS = vocabulary_module()


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_without_slash() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/")
def index() -> Response:
    return _file("index.html")


@router.get("/docs")
def api_reference() -> Response:
    return _file("docs.html")


@router.get("/ui/static/vocabulary.js")
def vocabulary() -> Response:
    return Response(VOCABULARY_JS, media_type=_MEDIA_TYPES[".js"], headers=_HEADERS)


@router.get("/ui/static/{file_name}")
def static_file(file_name: str) -> Response:
    return _file(file_name)


@router.get("/ui/static/vendor/{file_name}")
def vendor_file(file_name: str) -> Response:
    return _file(file_name, VENDOR_DIR)


@router.get("/ui/static/vendor/novnc/{file_path:path}")
def novnc_file(file_path: str) -> Response:
    """A module of noVNC's tree (its modules import each other by relative paths): each part a
    plain name, so nothing outside the tree and no dot-file is reachable."""
    *folders, file_name = file_path.split("/")
    if not all(WEB_ASSET.matches(folder) for folder in folders):
        raise HTTPException(404, f"no such file: {file_path}")
    return _file(file_name, NOVNC_DIR.joinpath(*folders))


def _file(file_name: str, directory: Path = STATIC_DIR) -> Response:
    """One file of ``directory`` by plain name: no sub-directories, no dot-files, known types only."""
    path = directory / file_name
    media_type = _MEDIA_TYPES.get(path.suffix)
    if not WEB_ASSET.matches(file_name) or media_type is None or not path.is_file():
        raise HTTPException(404, f"no such file: {file_name}")  # the app answers it as any 404
    return FileResponse(path, media_type=media_type, headers=_HEADERS)


__all__ = ["CONTENT_SECURITY_POLICY", "STATIC_DIR", "VOCABULARY_JS", "router"]
