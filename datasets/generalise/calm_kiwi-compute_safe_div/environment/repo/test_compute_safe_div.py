from calm_kiwi.lib import compute_safe_div


def test_compute_safe_div():
    assert compute_safe_div(7, 2) == 3.5
    assert compute_safe_div(1, 0) == 0
