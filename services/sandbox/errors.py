"""Errors of the sandbox manager: the shared HTTP errors of ``services/common/errors.py`` plus ``SandboxLost``;
each maps to one HTTP status in the admin and worker APIs."""

from __future__ import annotations

from services.common.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, Unauthorized, Unavailable
from services.common.errors import ServiceError as SandboxError

__all__ = ["BadRequest", "Conflict", "NotFound", "PayloadTooLarge", "SandboxError", "SandboxLost", "Unauthorized",
           "Unavailable", "error_for_status"]


class SandboxLost(SandboxError):
    """The sandbox died with its worker: the admin records it ``failed``."""
    status_code = 410


ERRORS_BY_STATUS: dict[int, type[SandboxError]] = {
    c.status_code: c for c in (BadRequest, Unauthorized, NotFound, Conflict, PayloadTooLarge, Unavailable, SandboxLost)}


def error_for_status(status: int, message: str) -> SandboxError:
    """Rebuild an error from an HTTP status (used by clients of the worker API)."""
    return ERRORS_BY_STATUS.get(status, SandboxError)(message)
