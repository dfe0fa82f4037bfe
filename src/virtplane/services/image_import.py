"""Images imported from an HTTP(S) URL: the server fetches the file itself, then it goes the way
of an upload (``services.image_upload``): received into a private file, checked against the
SHA-256 the admin gave, a VMDK converted to qcow2, written to every host of the library.

Only admins import, and the URL is theirs to choose: the server fetches from wherever it can
reach, as ``curl`` on its machine would (redirects followed, at most ``MAX_REDIRECTS``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx

from virtplane.domain.errors import Invalid

__all__ = ["fetched"]

CONNECT_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 300.0
"""How long the source may fall silent mid-file."""
MAX_REDIRECTS = 5


@contextlib.asynccontextmanager
async def fetched(url: str) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
    """(announced length, the body as it comes) of a GET of ``url``; 422 FetchFailed when it
    cannot be had, LengthRequired when its size is not announced (the quota needs it first)."""
    timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)
    try:
        async with (
            httpx.AsyncClient(timeout=timeout, follow_redirects=True, max_redirects=MAX_REDIRECTS) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise Invalid(
                    "FetchFailed", f"GET {url} answered {response.status_code}: nothing was written"
                )
            length = response.headers.get("content-length", "")
            if not length.isdigit():
                raise Invalid("LengthRequired", f"GET {url} announced no Content-Length: nothing was written")
            yield int(length), response.aiter_raw()
    except httpx.HTTPError as exc:
        raise Invalid(
            "FetchFailed", f"GET {url} failed: {exc or type(exc).__name__}; nothing was written"
        ) from None
