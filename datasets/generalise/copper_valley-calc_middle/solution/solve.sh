#!/bin/bash
# Reference solution (oracle): apply the gold patch to /workspace.
set -eu
cd /workspace
git apply --whitespace=nowarn /solution/patch.diff || patch -p1 --forward --fuzz=5 < /solution/patch.diff
