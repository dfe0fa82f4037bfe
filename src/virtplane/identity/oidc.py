"""An OpenID Connect login: the authorization code flow with PKCE, run by the server.

``begin`` makes a login's secrets (state, nonce, PKCE verifier), keeps them here for
``PENDING_S`` seconds and gives the provider's authorization URL; ``finish`` takes the
code the provider sent back with that state, exchanges it (with the verifier, and the
client secret if there is one) and checks the ID token: signature by the provider's keys,
issuer, audience, expiry and nonce. The dashboard's browser and the CLI's loopback listener
only carry the code; the verifier never leaves the server, so a code seen on the way is of
no use. Blocking (httpx): call it from a worker thread.

authlib makes the authorization URL and the PKCE challenge; joserfc (authlib's JOSE
library) checks the ID token.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from virtplane.identity.config import OidcSettings

PENDING_S = 600.0
"""How long a begun login may take at the provider."""
MAX_PENDING = 10_000
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


class OidcRefused(Exception):
    """The login cannot be finished: an unknown or old state, a code or ID token refused."""


class OidcUnavailable(Exception):
    """The provider did not answer, or answered with something that is not OpenID Connect."""


@dataclass(frozen=True)
class OidcUser:
    username: str
    subject: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class _Pending:
    verifier: str
    nonce: str
    redirect_uri: str
    purpose: str
    at: float


class OidcLogin:
    def __init__(self, settings: OidcSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._lock = threading.Lock()  # routes run in worker threads
        self._metadata: dict[str, Any] | None = None
        self._keys: KeySet | None = None

    def begin(self, redirect_uri: str, purpose: str) -> tuple[str, str]:
        """(the provider's authorization URL, the state) for a login that comes back to ``redirect_uri``."""
        state, nonce, verifier = (secrets.token_urlsafe(32) for _ in range(3))
        url = prepare_grant_uri(
            self._endpoint("authorization_endpoint"),
            self.settings.client_id,
            "code",
            redirect_uri=redirect_uri,
            scope=self.settings.scopes,
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        now = self._clock()
        with self._lock:
            while self._pending and (
                len(self._pending) >= MAX_PENDING or next(iter(self._pending.values())).at + PENDING_S < now
            ):
                self._pending.popitem(last=False)
            self._pending[state] = _Pending(verifier, nonce, redirect_uri, purpose, now)
        return url, state

    def finish(self, state: str, code: str) -> tuple[OidcUser, str]:
        """The user the provider vouches for, and the purpose ``begin`` was given; OidcRefused or
        OidcUnavailable otherwise. A state is used once."""
        with self._lock:
            pending = self._pending.pop(state, None)
        if pending is None or pending.at + PENDING_S < self._clock():
            raise OidcRefused("no login is waiting for this state (it expired, was used, or was never begun)")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": pending.redirect_uri,
            "client_id": self.settings.client_id,
            "code_verifier": pending.verifier,
        }
        secret = self.settings.client_secret
        auth = (self.settings.client_id, secret) if secret else None
        answer = self._http("POST", self._endpoint("token_endpoint"), data=form, auth=auth)
        if answer.status_code >= 400:
            raise OidcRefused(f"the provider refused the code: {_said(answer)}")
        id_token = _json(answer).get("id_token")
        if not isinstance(id_token, str):
            raise OidcUnavailable("the provider's token answer has no id_token")
        claims = self._verified(id_token, pending.nonce)
        name = claims.get(self.settings.username_claim) or claims["sub"]
        groups = claims.get(self.settings.groups_claim) or []
        if isinstance(groups, str):
            groups = [groups]
        return OidcUser(
            str(name), str(claims["sub"]), tuple(sorted({str(g) for g in groups}))
        ), pending.purpose

    def _verified(self, id_token: str, nonce: str) -> dict[str, Any]:
        try:
            token = jwt.decode(id_token, self._key_set(), algorithms=ID_TOKEN_ALGORITHMS)
        except ValueError:  # a key id we do not have: the provider may have rotated its keys
            self._keys = None
            try:
                token = jwt.decode(id_token, self._key_set(), algorithms=ID_TOKEN_ALGORITHMS)
            except (JoseError, ValueError) as error:
                raise OidcRefused(f"the ID token's signature is not the provider's: {error}") from None
        except JoseError as error:
            raise OidcRefused(f"the ID token's signature is not the provider's: {error}") from None
        registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": self._metadata_document()["issuer"]},
            aud={"essential": True, "value": self.settings.client_id},
            sub={"essential": True},
            exp={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(token.claims)
        except JoseError as error:
            raise OidcRefused(f"the ID token is not for this login: {error}") from None
        return dict(token.claims)

    def _metadata_document(self) -> dict[str, Any]:
        if self._metadata is None:
            url = f"{self.settings.issuer}/.well-known/openid-configuration"
            document = _json(self._http("GET", url))
            if document.get("issuer", "").rstrip("/") != self.settings.issuer:
                raise OidcUnavailable(f"{url} names another issuer: {document.get('issuer')!r}")
            self._metadata = document
        return self._metadata

    def _endpoint(self, name: str) -> str:
        value = self._metadata_document().get(name)
        if not isinstance(value, str):
            raise OidcUnavailable(f"the provider's metadata has no {name}")
        return value

    def _key_set(self) -> KeySet:
        if self._keys is None:
            try:
                self._keys = KeySet.import_key_set(_json(self._http("GET", self._endpoint("jwks_uri"))))  # type: ignore[arg-type]
            except (JoseError, ValueError, TypeError) as error:
                raise OidcUnavailable(f"the provider's keys cannot be read: {error}") from None
        return self._keys

    def _http(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return httpx.request(method, url, timeout=self.settings.timeout_s, **kwargs)
        except httpx.HTTPError as error:
            raise OidcUnavailable(f"the OpenID provider at {url} did not answer: {error}") from None


def _json(answer: httpx.Response) -> dict[str, Any]:
    try:
        document = answer.json()
    except ValueError:
        raise OidcUnavailable(f"{answer.request.url} answered {answer.status_code}, not JSON") from None
    if not isinstance(document, dict):
        raise OidcUnavailable(f"{answer.request.url} answered JSON that is not an object")
    return document


def _said(answer: httpx.Response) -> str:
    try:
        document = answer.json()
    except ValueError:
        return f"HTTP {answer.status_code}"
    if isinstance(document, dict):
        return f"{document.get('error', answer.status_code)}: {document.get('error_description', '')}".strip()
    return f"HTTP {answer.status_code}"
