from keen_lynx.utils import get_safe_div


def test_get_safe_div():
    assert get_safe_div(7, 2) == 3.5
    assert get_safe_div(1, 0) == 0


def test_get_safe_div_hidden():
    assert get_safe_div(9, 3) == 3
    assert get_safe_div(1, 4) == 0.25
    assert get_safe_div(5, 2) == 2.5
