"""Templates are read directly (services.common.config.load_config) wherever config/ has not been
written yet: every placeholder of every template needs a value in TEMPLATE_DEFAULTS, and the result
must be YAML with the embedded default's values."""

from __future__ import annotations

import pytest
import yaml

from services.common.config import PLACEHOLDER, TEMPLATE_DEFAULTS, render_template
from services.common.paths import TEMPLATES_DIR

TEMPLATES = sorted(p.name for p in TEMPLATES_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_template_renders_with_the_defaults(name):
    text = (TEMPLATES_DIR / name).read_text()
    assert set(PLACEHOLDER.findall(text)) <= set(TEMPLATE_DEFAULTS), name
    data = yaml.safe_load(render_template(text))
    assert isinstance(data, dict) and data


def test_harbor_template_renders_with_the_defaults():
    sandbox = yaml.safe_load(render_template((TEMPLATES_DIR / "harbor.yaml").read_text()))["sandbox"]
    assert sandbox["extra_headers"] == {} and sandbox["cluster"] is None and sandbox["flavor"] == "local"


def test_engine_template_defaults_are_the_in_process_cpu_runtime():
    engine = yaml.safe_load(render_template((TEMPLATES_DIR / "engine.yaml").read_text()))["engine"]
    assert engine["ray"] is None and engine["sampler_options"] == {} and engine["gradient_checkpointing"] is False
