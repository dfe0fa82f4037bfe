"""A login against an LDAP directory (``ldap3``): a simple bind as the user, then their groups.

The user's own bind is the password check: virtplane never reads or compares a password. A
wrong password, an unknown user and an empty password are one refusal (``LoginRefused``),
so that an answer never says which part was wrong; a directory that does not answer, or
answers with an error of its own, is ``DirectoryUnavailable``. Blocking: call it from a
worker thread.
"""

from __future__ import annotations

import contextlib
import ssl
from dataclasses import dataclass
from math import ceil
from typing import Any

from ldap3 import NONE, SUBTREE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException, LDAPInvalidDnError, LDAPPasswordIsMandatoryError
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn

from virtplane.identity.config import LdapSettings

INVALID_CREDENTIALS = 49
NO_SUCH_OBJECT = 32


class LoginRefused(Exception):
    """The username or the password is wrong (never said which)."""


class DirectoryUnavailable(Exception):
    """The directory did not answer, or failed the look-up; the message says how."""


@dataclass(frozen=True)
class DirectoryUser:
    username: str
    dn: str
    groups: tuple[str, ...]


class LdapDirectory:
    def __init__(self, settings: LdapSettings) -> None:
        self.settings = settings
        # ldap3's own default is not to check the server's certificate: a password would go to
        # whoever answers. Checked against ca-file, or the system's CAs, and the host's name.
        tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=settings.ca_file)
        # ldap3 takes no path, not even the "/" of ldap://host:389/
        self._server = Server(
            settings.url.rstrip("/"),
            use_ssl=settings.url.startswith("ldaps://"),
            tls=tls,
            get_info=NONE,
            connect_timeout=settings.timeout_s,
        )

    def authenticate(self, username: str, password: str) -> DirectoryUser:
        """The user, if ``password`` is theirs; LoginRefused or DirectoryUnavailable otherwise."""
        if not username or not password:  # an empty password would be an anonymous bind
            raise LoginRefused()
        try:
            dn = self._user_dn(username)
            connection = self._connection(dn, password)
            try:
                self._secure(connection)
                if not connection.bind():
                    if connection.result.get("result") == INVALID_CREDENTIALS:
                        raise LoginRefused()
                    raise DirectoryUnavailable(f"the LDAP server refused the bind: {_said(connection)}")
                groups = self._groups(connection, username, dn)
            finally:
                _close(connection)
        except (LDAPInvalidDnError, LDAPPasswordIsMandatoryError):
            raise LoginRefused() from None
        except LDAPException as error:
            raise DirectoryUnavailable(
                f"the LDAP server at {self.settings.url} did not answer: {error}"
            ) from None
        return DirectoryUser(username, dn, groups)

    def _connection(self, dn: str | None, password: str | None) -> Connection:
        return Connection(
            self._server,
            user=dn,
            password=password,
            read_only=True,
            receive_timeout=ceil(self.settings.timeout_s),  # whole seconds: ldap3 packs it as SO_RCVTIMEO
            raise_exceptions=False,
        )

    def _secure(self, connection: Connection) -> None:
        """With start-tls: TLS before anything is sent (the bind carries the password)."""
        if self.settings.start_tls:
            connection.open()
            if not connection.start_tls():
                raise DirectoryUnavailable(f"the LDAP server refused StartTLS: {_said(connection)}")

    def _user_dn(self, username: str) -> str:
        settings = self.settings
        if settings.user_dn_template is not None:
            return settings.user_dn_template.replace("{username}", escape_rdn(username))
        assert settings.user_search_base is not None  # one of the two: checked with the settings
        search = self._connection(settings.bind_dn, settings.bind_password)
        try:
            self._secure(search)
            if not search.bind():
                raise DirectoryUnavailable(f"the LDAP server refused the search account: {_said(search)}")
            found = search.search(
                settings.user_search_base,
                settings.user_filter.replace("{username}", escape_filter_chars(username)),
                search_scope=SUBTREE,
                attributes=[],
                size_limit=2,
            )
            entries = [e for e in search.response or [] if e.get("type") == "searchResEntry"]
            if not found and search.result.get("result") not in (0, NO_SUCH_OBJECT):
                raise DirectoryUnavailable(f"the LDAP server failed the user search: {_said(search)}")
        finally:
            _close(search)
        if len(entries) != 1:  # nobody, or a filter that is not unique: refuse either way
            raise LoginRefused()
        dn: str = entries[0]["dn"]
        return dn

    def _groups(self, connection: Connection, username: str, dn: str) -> tuple[str, ...]:
        settings = self.settings
        query = settings.group_filter.replace("{user_dn}", escape_filter_chars(dn)).replace(
            "{username}", escape_filter_chars(username)
        )
        attribute = settings.group_name_attribute
        found = connection.search(
            settings.group_search_base, query, search_scope=SUBTREE, attributes=[attribute]
        )
        if not found and connection.result.get("result") not in (0, NO_SUCH_OBJECT):
            raise DirectoryUnavailable(f"the LDAP server failed the group search: {_said(connection)}")
        names: list[str] = []
        for entry in connection.response or []:
            if entry.get("type") != "searchResEntry":
                continue
            value: Any = entry.get("attributes", {}).get(attribute)
            names += [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []
        return tuple(sorted(set(names)))


def _close(connection: Connection) -> None:
    # after a failed TLS handshake the socket is gone: the unbind's own error would hide the reason
    with contextlib.suppress(LDAPException):
        connection.unbind()


def _said(connection: Connection) -> str:
    result = connection.result or {}
    return (
        f"{result.get('description', 'error')} ({result.get('result')}) {result.get('message', '')}".strip()
    )
