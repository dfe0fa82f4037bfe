"""The dashboard's routes: served without a token, only known files, a strict content policy."""

from __future__ import annotations

import re

import httpx

from tests.conftest import LiveServer
from virtplane.web import STATIC_DIR


def test_root_redirects_to_the_dashboard(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        for path in ("/", "/ui"):
            response = client.get(path)
            assert response.status_code == 307
            assert response.headers["location"] == "/ui/"


def test_the_page_and_its_files_need_no_token(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        page = client.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        referenced = re.findall(r'(?:src|href)="static/([^"]+)"', page.text)
        assert set(referenced) >= {"app.js", "style.css"}
        for name in referenced:
            asset = client.get(f"/ui/static/{name}")
            assert asset.status_code == 200, name
        assert client.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/ui/static/style.css").headers["content-type"].startswith("text/css")
        # the API itself still wants a token
        assert client.get("/v1/vms").status_code == 401


def test_only_plain_files_of_the_static_directory_are_served(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        for path in (
            "/ui/static/missing.js",
            "/ui/static/..%2F__init__.py",
            "/ui/static/%2E%2E%2F__init__.py",
            "/ui/static/.hidden.js",
            "/ui/static/__init__.py",
        ):
            response = client.get(path)
            assert response.status_code == 404, path
            assert response.json()["reason"] == "NotFound"


def test_the_page_routes_stay_out_of_the_openapi_document(live_server: LiveServer) -> None:
    with httpx.Client(base_url=live_server.url) as client:
        paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p == "/" or p.startswith("/ui")]


def test_the_script_never_writes_html() -> None:
    """User data goes in as text: no HTML sinks anywhere in the page's script."""
    sinks = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function")
    scripts = sorted(STATIC_DIR.glob("*.js"))
    assert len(scripts) > 1, "the page's modules"
    for script in scripts:
        source = script.read_text()
        for sink in sinks:
            assert sink not in source, f"{script.name}: {sink}"


def test_every_module_the_page_imports_is_served(live_server: LiveServer) -> None:
    """The modules import each other by relative path ("./dom.js"): each must be a served file."""
    imported = {"app.js"}
    for script in STATIC_DIR.glob("*.js"):
        imported |= set(re.findall(r'^import (?:[^"]* from )?"\./([^"]+)";', script.read_text(), re.M))
    assert imported >= {"dom.js", "api.js", "dialogs.js", "registry.js", "vm-actions.js", "maintenance.js"}
    with httpx.Client(base_url=live_server.url) as client:
        for name in sorted(imported):
            response = client.get(f"/ui/static/{name}")
            assert response.status_code == 200, name
            assert response.headers["content-type"].startswith("text/javascript"), name


def test_novnc_is_served_module_by_module_and_nothing_outside_its_tree(live_server: LiveServer) -> None:
    """noVNC's ES modules import each other by relative paths within its tree (vendor/novnc)."""
    tree = STATIC_DIR / "vendor" / "novnc"
    modules = sorted(path.relative_to(tree).as_posix() for path in tree.rglob("*.js"))
    assert {"core/rfb.js", "core/decoders/raw.js", "vendor/pako/lib/zlib/inflate.js"} <= set(modules)
    with httpx.Client(base_url=live_server.url) as client:
        for module in modules:
            response = client.get(f"/ui/static/vendor/novnc/{module}")
            assert response.status_code == 200, module
            assert response.headers["content-type"].startswith("text/javascript"), module
            assert "default-src 'none'" in response.headers["content-security-policy"], module
        for path in (
            "/ui/static/vendor/novnc/%2E%2E/xterm.js",
            "/ui/static/vendor/novnc/core/%2E%2E/%2E%2E/%2E%2E/app.js",
            "/ui/static/vendor/novnc/core/..%2F..%2F..%2Fapp.js",
            "/ui/static/vendor/novnc/.git/config.js",
            "/ui/static/vendor/novnc//core/rfb.js",
            "/ui/static/vendor/novnc/LICENSE.txt",  # shipped for its licence, not served
        ):
            response = client.get(path)
            assert response.status_code == 404, path
