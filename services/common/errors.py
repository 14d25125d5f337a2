"""Errors that map to one HTTP status, shared by every service (the backend's and the sandbox manager's
``errors.py`` add only their own specifics: the backend's failed-future category and ``ServerFault``, the
sandbox manager's ``SandboxLost`` and the status -> error table its clients rebuild errors with)."""

from __future__ import annotations


class ServiceError(Exception):
    """An error a service answers with ``status_code``; a 4xx is the caller's fault (category ``user``), a 5xx
    the service's own (category ``server``)."""

    status_code = 500

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message

    @property
    def category(self) -> str:
        return "user" if self.status_code < 500 else "server"


class BadRequest(ServiceError):
    status_code = 400


class Unauthorized(ServiceError):
    status_code = 401


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


class PayloadTooLarge(ServiceError):
    status_code = 413


class Unavailable(ServiceError):
    status_code = 503
