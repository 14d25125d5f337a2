"""python -m cookbook.modelservice [serve | mini-swe-agent | install-agent] [options] — see docs/modelservice.md.

``mini-swe-agent`` and ``install-agent`` are the agent driver's (agent_runner.py); anything else is the
ModelService itself (``python -m services.modelservice``)."""

from __future__ import annotations

import sys

from services.modelservice.__main__ import main as serve_main

from .agent_runner import install_agent
from .agent_runner import main as runner_main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "mini-swe-agent":
        return runner_main(argv[1:])
    if argv and argv[0] == "install-agent":
        return install_agent(argv[1:])
    return serve_main(argv)


if __name__ == "__main__":
    sys.exit(main())
