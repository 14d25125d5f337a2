"""The backend's errors: the shared HTTP errors of ``services/common/errors.py`` plus ``ServerFault``.

Synchronous endpoints turn them into 4xx JSON bodies; failed futures report them as
HTTP 200 ``{"error": ..., "category": ...}`` (the SDK retries 5xx forever, so bad input
must never become a 5xx)."""

from __future__ import annotations

from services.common.errors import BadRequest, NotFound, Unauthorized
from services.common.errors import ServiceError as TinkerError

__all__ = ["BadRequest", "NotFound", "ServerFault", "TinkerError", "Unauthorized"]


class ServerFault(TinkerError):
    """An internal fault while executing a job (reported inside the future, category server)."""

    status_code = 500
