"""Errors that carry an HTTP status and a Tinker failure category.

Synchronous endpoints turn them into 4xx JSON bodies; failed futures report them as
HTTP 200 ``{"error": ..., "category": ...}`` (the SDK retries 5xx forever, so bad input
must never become a 5xx)."""

from __future__ import annotations


class TinkerError(Exception):
    status_code = 400
    category = "user"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadRequest(TinkerError):
    status_code = 400


class NotFound(TinkerError):
    status_code = 404


class Unauthorized(TinkerError):
    status_code = 401


class ServerFault(TinkerError):
    """An internal fault while executing a job (reported inside the future, category server)."""

    status_code = 500
    category = "server"
