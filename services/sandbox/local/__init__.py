"""The ``local`` backend: isolated sandboxes on this host without Docker.

Recipe (measured in ../shared/docs/sandboxes-and-tasks.md §3.4):
  namespace.py – the manager runs in a private mount namespace; mount/umount via libc
  workspace.py – cached base (lower layer) + per-sandbox size-capped tmpfs + overlayfs
  cgroups.py   – per-sandbox v1 memory/pids/cpu limits, v2 directories for ``cgroup.kill``
  jail.py      – the bubblewrap command line (private root, ro binds, fresh net/pid/ipc ns)
  process.py   – spawning one contained process with rlimits, uid drop, timeout, output caps
  sessions.py  – persistent bash sessions (ROCK run_in_session)
  backend.py   – ``LocalBackend`` tying these together
"""
