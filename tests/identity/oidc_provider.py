"""A real OpenID provider for the tests (``oidc-provider-mock``, on authlib and Flask) on a
loopback port, with the users of ``PEOPLE``; what the relying party sent it is recorded, so
that a test can check the PKCE pair it never sees otherwise."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import httpx
from werkzeug.serving import make_server

PEOPLE = {
    # subject: (preferred_username, groups)
    "sub-alice": ("alice", ["virtplane-operators", "staff"]),
    "sub-carol": ("carol", ["virtplane-viewers", "virtplane-admins"]),
    "sub-dave": ("dave", ["staff"]),
}


@dataclass
class Provider:
    issuer: str
    seen: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    """(path, its query or form) of each authorization and token request, in order."""

    def sent(self, path: str) -> list[dict[str, list[str]]]:
        return [params for seen_path, params in self.seen if seen_path == path]


def log_in_at_provider(authorization_url: str, subject: str) -> str:
    """What a browser does: open the provider's page, log in as ``subject``; the URL it is sent back to."""
    with httpx.Client(timeout=10) as browser:
        page = browser.get(authorization_url)
        assert page.status_code == 200, page.text
        back = browser.post(authorization_url, data={"sub": subject})
    assert back.status_code == 302, back.text
    return back.headers["location"]


@contextmanager
def running_provider() -> Iterator[Provider]:
    from oidc_provider_mock import User, app

    flask_app = app(
        user_claims=[
            User(sub=sub, claims={"preferred_username": name, "groups": groups})
            for sub, (name, groups) in PEOPLE.items()
        ]
    )
    provider = Provider(issuer="")

    def recording(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path in ("/oauth2/authorize", "/oauth2/token"):
            params = parse_qs(environ.get("QUERY_STRING", ""))
            if environ.get("REQUEST_METHOD") == "POST" and path == "/oauth2/token":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length)
                params.update(parse_qs(body.decode()))
                environ["wsgi.input"] = io.BytesIO(body)  # read here: Flask reads it again
            provider.seen.append((path, params))
        return flask_app(environ, start_response)

    server = make_server("127.0.0.1", 0, recording, threaded=True)
    provider.issuer = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        thread.join(10)
