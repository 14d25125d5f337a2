"""Command-line arguments shared by the rollout and RL modes (cli.py, train.py)."""

from __future__ import annotations

import argparse


def agent_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--agent", default="builtin", choices=["builtin", "mini-swe-agent"],
                    help="builtin: cookbook's SWE agent (default); mini-swe-agent: the unmodified harness in each "
                         "sandbox, its model calls through the ModelService (docs/modelservice.md)")
