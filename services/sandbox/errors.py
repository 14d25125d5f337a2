"""Errors of the sandbox manager; each maps to one HTTP status in the admin and worker APIs."""

from __future__ import annotations


class SandboxError(Exception):
    status_code = 500


class BadRequest(SandboxError):
    status_code = 400


class Unauthorized(SandboxError):
    status_code = 401


class NotFound(SandboxError):
    status_code = 404


class Conflict(SandboxError):
    status_code = 409


class PayloadTooLarge(SandboxError):
    status_code = 413


class Unavailable(SandboxError):
    status_code = 503


class SandboxLost(SandboxError):
    """The sandbox died with its worker: the admin records it ``failed``."""
    status_code = 410


ERRORS_BY_STATUS = {c.status_code: c for c in (BadRequest, Unauthorized, NotFound, Conflict, PayloadTooLarge,
                                               Unavailable,
                                                  SandboxLost)}


def error_for_status(status: int, message: str) -> SandboxError:
    """Rebuild an error from an HTTP status (used by clients of the worker API)."""
    return ERRORS_BY_STATUS.get(status, SandboxError)(message)
