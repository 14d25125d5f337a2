"""The Tinker-compatible backend (docs/backend.md).

OpenMP reads ``OMP_WAIT_POLICY`` when torch is first imported, so it is set here, before any module
of the package imports torch: idle OpenMP threads sleep (PASSIVE) instead of spinning, which on a
few shared cores made every forward_backward several times slower (2 threads, load ~10-20).
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
