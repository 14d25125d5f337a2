#!/usr/bin/env python3
"""Prepare task sets for the sandboxes: build scrubbed workspace bases, validate tasks
(gold = 1, empty = 0, no git history leak), synthesise the built-in *real* set from pinned
sdists, or synthesise tasks from any local repo. Run with --help; see docs/tasks.md."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from services.tasks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
