"""templates/harbor.yaml is read directly (services.common.config.load_config) wherever config/ has not
been written yet: every placeholder needs a value in TEMPLATE_DEFAULTS, and the result must be YAML."""

from __future__ import annotations

import yaml

from services.common.config import PLACEHOLDER, TEMPLATE_DEFAULTS, render_template
from services.common.paths import TEMPLATES_DIR


def test_harbor_template_renders_with_the_defaults():
    text = (TEMPLATES_DIR / "harbor.yaml").read_text()
    assert set(PLACEHOLDER.findall(text)) <= set(TEMPLATE_DEFAULTS)
    sandbox = yaml.safe_load(render_template(text))["sandbox"]
    assert sandbox["extra_headers"] == {} and sandbox["cluster"] is None and sandbox["flavor"] == "local"
