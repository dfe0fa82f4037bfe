"""Why a request is turned down, in the domain's words; the API maps each kind to an HTTP
status in one table (``api/errors.py``), so services and controllers never speak HTTP.

::

    DomainError(reason, message)       reason: a machine-readable word, message: for people
    ├── NotFound     what the request names does not exist              (404)
    ├── Invalid      the request refers to something it cannot use       (422)
    ├── Refused      the request conflicts with the state things are in  (409)
    └── TooLarge     what the request would store passes a quota          (413)
"""

from __future__ import annotations

__all__ = ["DomainError", "Invalid", "NotFound", "Refused", "TooLarge"]


class DomainError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class NotFound(DomainError):
    pass


class Invalid(DomainError):
    pass


class Refused(DomainError):
    pass


class TooLarge(DomainError):
    pass
