"""Logging set-up shared by every service: one file per service plus stderr."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path


def setup_logging(service: str, log_file: str | Path | None, level: str = "INFO") -> logging.Logger:
    root = logging.getLogger()
    root.setLevel(level)
    for h in list(root.handlers):
        root.removeHandler(h)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    root.addHandler(err)
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file)
        fh.setFormatter(fmt)
        root.addHandler(fh)
    return logging.getLogger(service)


PER_REQUEST = {"per_request": True}   # ``log.info(..., extra=PER_REQUEST)``: a line any caller can trigger


class RateLimitFilter(logging.Filter):
    """At most ``burst`` records per message template and ``window_s`` for WARNING-or-worse records
    and for records logged with ``extra=PER_REQUEST`` (any level); the rest are dropped and counted,
    and the count is reported with the next record let through (and in ``dropped_total``).
    Keeps a flood of failing requests (say, half-sent bodies from inside a sandbox) from filling the disk."""

    dropped_total = 0   # every filter in the process: what the services report (ModelService /health)

    def __init__(self, burst: int = 5, window_s: float = 60.0):
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self._seen: dict[tuple[str, str], tuple[float, int, int]] = {}   # key -> (window start, passed, dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and not getattr(record, "per_request", False):
            return True
        seen = getattr(record, "_rate_limit_ok", None)   # one decision per record, however many handlers ask
        if seen is not None:
            return bool(seen)
        ok = self._decide(record)
        record._rate_limit_ok = ok
        if not ok:
            RateLimitFilter.dropped_total += 1
        return ok

    def _decide(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = time.monotonic()
        start, passed, dropped = self._seen.get(key, (now, 0, 0))
        if now - start > self.window_s:
            start, passed = now, 0
        if passed >= self.burst:
            self._seen[key] = (start, passed, dropped + 1)
            return False
        if dropped:
            record.msg = f"{record.msg} [{dropped} similar messages suppressed]"
        self._seen[key] = (start, passed + 1, 0)
        if len(self._seen) > 10_000:
            self._seen.clear()
        return True


def rate_limit_errors(burst: int = 5, window_s: float = 60.0) -> None:
    """Install a RateLimitFilter on every handler of the root logger."""
    f = RateLimitFilter(burst, window_s)
    for h in logging.getLogger().handlers:
        h.addFilter(f)
