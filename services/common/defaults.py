"""Defaults shared by configure.py, the config loaders and the ModelService: defined once here (no imports, so
configure.py can read it under any Python)."""

TINY_MODEL_NAME = "local/qwen3-tiny-xs"      # the embedded tiny model's id (setup.sh runtime creates it)
TINY_MODEL_PATH = "models/qwen3-tiny-xs"     # its directory, relative to the repository root
