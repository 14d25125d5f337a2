from calm_kiwi.lib import compute_safe_div


def test_compute_safe_div():
    assert compute_safe_div(7, 2) == 3.5
    assert compute_safe_div(1, 0) == 0


def test_compute_safe_div_hidden():
    assert compute_safe_div(9, 3) == 3
    assert compute_safe_div(1, 4) == 0.25
    assert compute_safe_div(5, 2) == 2.5
