"""The HTTP client the CLI talks to the virtplane server through.

Every failure the user can cause or meet is turned into one of two exceptions:

- ``ApiError``: the server answered with a 4xx/5xx; carries its machine-readable
  ``reason`` and human ``message``.
- ``ServerUnreachable``: nothing answered at the URL (refused, DNS, timeout).

The transport is injectable so tests can answer requests with ``httpx.MockTransport``
(or the real app through ``httpx.ASGITransport``) instead of a socket.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

__all__ = [
    "DEFAULT_URL",
    "ApiClient",
    "ApiError",
    "CliError",
    "JsonObject",
    "ServerUnreachable",
]

DEFAULT_URL = "http://127.0.0.1:8470"
REQUEST_TIMEOUT_S = 30.0

JsonObject = dict[str, Any]


class CliError(Exception):
    """A failure to report to the user as ``Error (reason): message`` with exit code 1."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ApiError(CliError):
    """The server refused or failed a request."""

    def __init__(self, status_code: int, reason: str, message: str) -> None:
        super().__init__(reason, message)
        self.status_code = status_code


class ServerUnreachable(CliError):
    """No server answered at the URL."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(
            "ServerUnreachable",
            f"the virtplane server is not reachable at {url} ({detail}). "
            "Start one with `virtplane serve --demo`, or point the CLI at yours with "
            "--url or VIRTPLANE_URL.",
        )
        self.url = url


def _error_from_response(response: httpx.Response) -> ApiError:
    """Build an ``ApiError`` from an error response, whatever shape its body has."""
    try:
        body: Any = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    fallback_reason = response.reason_phrase.replace(" ", "") or f"HTTP{response.status_code}"
    if isinstance(body, dict):
        if "reason" in body or "message" in body:
            return ApiError(
                response.status_code,
                str(body.get("reason") or fallback_reason),
                str(body.get("message") or ""),
            )
        if "detail" in body:  # FastAPI's own errors (422 validation, 404 route not found)
            return ApiError(response.status_code, fallback_reason, _format_detail(body["detail"]))
    text = response.text.strip() or response.reason_phrase
    return ApiError(response.status_code, fallback_reason, text)


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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "virtplane-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, transport=transport, timeout=timeout_s
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
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty) or raise."""
        try:
            response = self._http.request(
                method,
                path,
                json=body,
                params=params,
            )
        except httpx.ConnectError as error:
            raise ServerUnreachable(self.base_url, "connection refused or host unknown") from error
        except httpx.TimeoutException as error:
            raise ServerUnreachable(self.base_url, "the request timed out") from error
        except httpx.TransportError as error:
            raise ServerUnreachable(self.base_url, str(error) or type(error).__name__) from error
        if response.is_error:
            raise _error_from_response(response)
        if not response.content:
            return None
        try:
            return response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(
                response.status_code, "InvalidResponse", f"the server sent non-JSON data for {path}"
            ) from error

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

    def list_items(self, plural: str, params: dict[str, str | int] | None = None) -> list[JsonObject]:
        result = self.request("GET", f"/v1/{plural}", params=params)
        if not isinstance(result, dict) or not isinstance(result.get("items"), list):
            raise ApiError(200, "InvalidResponse", f"expected {{'items': [...]}} from GET /v1/{plural}")
        return [item for item in result["items"] if isinstance(item, dict)]

    def get(self, plural: str, name: str) -> JsonObject:
        return self._object("GET", f"/v1/{plural}/{name}")

    def create(self, plural: str, resource: JsonObject) -> JsonObject:
        return self._object("POST", f"/v1/{plural}", resource)

    def replace(self, plural: str, name: str, resource: JsonObject) -> JsonObject:
        return self._object("PUT", f"/v1/{plural}/{name}", resource)

    def patch(
        self, plural: str, name: str, merge_patch: JsonObject, params: dict[str, str | int] | None = None
    ) -> JsonObject:
        return self._object("PATCH", f"/v1/{plural}/{name}", merge_patch, params)

    def delete(self, plural: str, name: str, params: dict[str, str | int] | None = None) -> JsonObject:
        return self._object("DELETE", f"/v1/{plural}/{name}", params=params)

    def post(self, path: str, body: Any) -> JsonObject:
        return self._object("POST", path, body)

    def get_path(self, path: str) -> JsonObject:
        return self._object("GET", path)

    def delete_path(self, path: str) -> JsonObject:
        return self._object("DELETE", path)

    def events(
        self, kind: str | None = None, name: str | None = None, limit: int = 50, after_id: int = 0
    ) -> list[JsonObject]:
        """The newest ``limit`` events (after ``after_id``), as the server orders them (oldest first)."""
        params: dict[str, str | int] = {"limit": limit}
        if after_id:
            params["after_id"] = after_id
        if kind:
            params["kind"] = kind
        if name:
            params["name"] = name
        return self.list_items("events", params)
