"""The HTTP client the CLI talks to the virtplane server through.

Every failure the user can cause or meet is turned into one of two exceptions:

- ``ApiError``: the server answered with a 4xx/5xx; carries its machine-readable
  ``reason`` and human ``message``.
- ``ServerUnreachable``: nothing answered at the URL (refused, DNS, timeout).

The transport is injectable so tests can answer requests with ``httpx.MockTransport``
(or the real app through ``httpx.ASGITransport``) instead of a socket.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import httpx

from virtplane.cli.errors import (
    DEFAULT_URL,
    ApiError,
    CliError,
    JsonObject,
    ServerUnreachable,
    WatchExpired,
)

__all__ = ["ApiClient", "error_from_response"]

REQUEST_TIMEOUT_S = 30.0
PAGE_SIZE = 500
WATCH_TIMEOUT = httpx.Timeout(REQUEST_TIMEOUT_S, read=30.0)
"""The server sends a bookmark at least every 10 s: 30 s of silence is a dead connection."""
RECONNECT_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0)


def error_from_response(response: httpx.Response) -> ApiError:
    """Build an ``ApiError`` from an error response, whatever shape its body has."""
    try:
        body: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    fallback_reason = response.reason_phrase.replace(" ", "") or f"HTTP{response.status_code}"
    if isinstance(body, dict):
        if "reason" in body or "message" in body:
            fields = body.get("fields")
            return ApiError(
                response.status_code,
                str(body.get("reason") or fallback_reason),
                str(body.get("message") or ""),
                [str(f) for f in fields] if isinstance(fields, list) else None,
            )
        if "detail" in body:  # FastAPI's own errors (422 validation, 404 route not found)
            return ApiError(response.status_code, fallback_reason, _format_detail(body["detail"]))
    text = response.text.strip() or response.reason_phrase
    return ApiError(response.status_code, fallback_reason, text)


def _untrusted(error: BaseException, url: str) -> CliError | None:
    from virtplane.cli.tls import untrusted_from  # it builds on this module's CliError

    return untrusted_from(error, url)


def _format_detail(detail: Any) -> str:
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                location = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{location}: {item.get('msg', '')}" if location else str(item.get("msg", "")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


class ApiClient:
    """A thin synchronous client of the virtplane REST API (``/v1/...``)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "virtplane-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport, timeout=timeout_s, verify=verify
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ raw

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str | int] | None = None,
        read_timeout_s: float | None = None,
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty) or raise.
        ``read_timeout_s``: how long the answer may take (a server that fetches a file first)."""
        with self._answered():
            if read_timeout_s is None:
                response = self._http.request(method, path, json=body, params=params)
            else:
                timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=read_timeout_s)
                response = self._http.request(method, path, json=body, params=params, timeout=timeout)
        if response.is_error:
            raise error_from_response(response)
        if not response.content:
            return None
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(
                response.status_code, "InvalidResponse", f"the server sent non-JSON data for {path}"
            ) from error

    @contextlib.contextmanager
    def stream(self, path: str, read_timeout_s: float) -> Iterator[httpx.Response]:
        """A GET whose body is read as it arrives (``backup``); fails as ``request`` does."""
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=read_timeout_s)
        with self._answered(), self._http.stream("GET", path, timeout=timeout) as response:
            if response.is_error:
                response.read()
                raise error_from_response(response)
            yield response

    def upload(
        self,
        path: str,
        content: Iterator[bytes],
        length: int,
        params: Mapping[str, str | list[str]],
        read_timeout_s: float,
    ) -> Any:
        """A PUT of ``length`` bytes from ``content`` (``image upload``), as they are read; the
        answer may take ``read_timeout_s`` after the last byte (the server writes to its hosts)."""
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=read_timeout_s)
        headers = {"Content-Length": str(length), "Content-Type": "application/octet-stream"}
        with self._answered():
            response = self._http.put(path, params=params, content=content, headers=headers, timeout=timeout)
        if response.is_error:
            raise error_from_response(response)
        return response.json()

    @contextlib.contextmanager
    def _answered(self) -> Iterator[None]:
        """httpx's transport errors as the CLI's: a certificate not trusted, or no server."""
        try:
            yield
        except httpx.ConnectError as error:
            raise _untrusted(error, self.base_url) or ServerUnreachable(
                self.base_url, "connection refused or host unknown"
            ) from error
        except httpx.TimeoutException as error:
            raise ServerUnreachable(self.base_url, "the request timed out") from error
        except httpx.TransportError as error:
            raise ServerUnreachable(self.base_url, str(error) or type(error).__name__) from error

    def _object(
        self, method: str, path: str, body: Any = None, params: dict[str, str | int] | None = None
    ) -> JsonObject:
        result = self.request(method, path, body=body, params=params)
        if result is None:
            return {}
        if not isinstance(result, dict):
            raise ApiError(200, "InvalidResponse", f"expected a JSON object from {method} {path}")
        return result

    # ------------------------------------------------------------------ resources

    def list_page(
        self, plural: str, params: dict[str, str | int] | None = None
    ) -> tuple[list[JsonObject], JsonObject]:
        """One page: its items and its metadata (``continue``, ``resource_version``)."""
        result = self.request("GET", f"/v1/{plural}", params=params)
        if not isinstance(result, dict) or not isinstance(result.get("items"), list):
            raise ApiError(200, "InvalidResponse", f"expected {{'items': [...]}} from GET /v1/{plural}")
        metadata = result.get("metadata")
        return [item for item in result["items"] if isinstance(item, dict)], (
            metadata if isinstance(metadata, dict) else {}
        )

    def list_all(
        self, plural: str, params: dict[str, str | int] | None = None
    ) -> tuple[list[JsonObject], int]:
        """Every item, a page at a time, and the list's resource_version (watch from it to miss nothing)."""
        items: list[JsonObject] = []
        query: dict[str, str | int] = {"limit": PAGE_SIZE, **(params or {})}
        revision = 0
        while True:
            page, metadata = self.list_page(plural, query)
            items += page
            revision = revision or _position(metadata)
            token = metadata.get("continue")
            if not token:
                return items, revision
            query["continue"] = str(token)

    def list_items(self, plural: str, params: dict[str, str | int] | None = None) -> list[JsonObject]:
        return self.list_all(plural, params)[0]

    def watch(
        self,
        plural: str,
        resource_version: int,
        params: dict[str, str | int] | None = None,
        *,
        timeout_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        on_retry: Callable[[CliError], None] | None = None,
    ) -> Generator[JsonObject]:
        """The changes after ``resource_version``: ``{"type", "object"}`` (bookmarks are consumed).

        A stream that ends, breaks or goes silent is opened again from the last revision
        seen, after a growing pause if it failed (``on_retry`` hears why). Raises
        ``WatchExpired`` when the server no longer has the changes after that revision:
        list again, then watch from the list's revision. With ``timeout_s`` it returns
        once that much time has passed (the server ends the stream then).
        """
        position = resource_version
        failures = 0
        deadline = None if timeout_s is None else monotonic() + timeout_s
        while True:
            query: dict[str, str | int | float] = {**(params or {}), "watch": 1, "resource_version": position}
            if deadline is not None:
                remaining = deadline - monotonic()
                if remaining <= 0:
                    return
                query["timeout_s"] = remaining
            try:
                with self._http.stream(
                    "GET", f"/v1/{plural}", params=query, timeout=WATCH_TIMEOUT
                ) as response:
                    if response.is_error:
                        response.read()
                        error = error_from_response(response)
                        if error.status_code == 410:
                            raise WatchExpired(error.reason, error.message)
                        raise error
                    for line in response.iter_lines():
                        event = json.loads(line) if line.strip() else None
                        if not isinstance(event, dict):
                            continue
                        failures = 0
                        if event.get("type") == "ERROR":
                            problem = event.get("object") or {}
                            if problem.get("code") == 410:
                                raise WatchExpired(str(problem.get("reason")), str(problem.get("message")))
                            raise ApiError(int(problem.get("code") or 500), "WatchError", str(problem))
                        position = max(position, _position(event.get("object")))
                        if event.get("type") != "BOOKMARK":
                            yield event
                continue  # the server ended the stream (its timeout, a restart): go on from here
            except (httpx.TransportError, json.JSONDecodeError) as error:
                untrusted = _untrusted(error, self.base_url)
                if untrusted is not None:  # retrying will not make the certificate trusted
                    raise untrusted from error
                failure: CliError = ServerUnreachable(self.base_url, str(error) or type(error).__name__)
            failures += 1
            if on_retry is not None:
                on_retry(failure)
            sleep(RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S)) - 1])

    def get(self, plural: str, name: str) -> JsonObject:
        return self._object("GET", f"/v1/{plural}/{name}")

    def create(self, plural: str, resource: JsonObject, *, dry_run: bool = False) -> JsonObject:
        """Create ``resource``; with ``dry_run`` the server only admits it and answers what it
        would store."""
        return self._object("POST", f"/v1/{plural}", resource, _dry_run(dry_run))

    def replace(self, plural: str, name: str, resource: JsonObject, *, dry_run: bool = False) -> JsonObject:
        return self._object("PUT", f"/v1/{plural}/{name}", resource, _dry_run(dry_run))

    def patch(
        self, plural: str, name: str, merge_patch: JsonObject, params: dict[str, str | int] | None = None
    ) -> JsonObject:
        return self._object("PATCH", f"/v1/{plural}/{name}", merge_patch, params)

    def delete(self, plural: str, name: str, params: dict[str, str | int] | None = None) -> JsonObject:
        return self._object("DELETE", f"/v1/{plural}/{name}", params=params)

    def post(self, path: str, body: Any, *, dry_run: bool = False) -> JsonObject:
        return self._object("POST", path, body, _dry_run(dry_run))

    def get_path(self, path: str) -> JsonObject:
        return self._object("GET", path)

    def delete_path(self, path: str) -> JsonObject:
        return self._object("DELETE", path)

    def events(
        self, kind: str | None = None, name: str | None = None, limit: int = 50, after_id: int = 0
    ) -> list[JsonObject]:
        """The newest ``limit`` events (after ``after_id``), as the server orders them (oldest first)."""
        return self.events_page(kind, name, limit, after_id)[0]

    def events_page(
        self, kind: str | None = None, name: str | None = None, limit: int = 50, after_id: int = 0
    ) -> tuple[list[JsonObject], int]:
        """The newest ``limit`` events and the newest event id when they were read (to follow from)."""
        params: dict[str, str | int] = {"limit": limit}
        if after_id:
            params["after_id"] = after_id
        if kind:
            params["kind"] = kind
        if name:
            params["name"] = name
        items, metadata = self.list_page("events", params)
        return items, _position(metadata)


def _dry_run(dry_run: bool) -> dict[str, str | int] | None:
    return {"dryRun": "true"} if dry_run else None


def _position(obj: Any) -> int:
    """The revision (or event id) an object, bookmark or list metadata stands at; 0 if none."""
    if not isinstance(obj, dict):
        return 0
    metadata = obj.get("metadata")
    value = metadata.get("resource_version") if isinstance(metadata, dict) else None
    if value is None:
        value = obj.get("resource_version", obj.get("id"))
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
