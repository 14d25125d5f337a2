"""The uvicorn server every service runs: it handles SIGINT/SIGTERM itself, so a requested stop
shuts down gracefully and exits with status 0 (uvicorn re-raises the signal after a graceful
shutdown otherwise, and the process dies of it)."""

from __future__ import annotations

import contextlib
from collections.abc import Generator

import uvicorn


class SignalServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    def request_exit(self) -> None:
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True
