from keen_lynx.utils import get_safe_div


def test_get_safe_div():
    assert get_safe_div(7, 2) == 3.5
    assert get_safe_div(1, 0) == 0
