from merry_fox.ops import get_clamp


def test_get_clamp():
    assert get_clamp(2, 0, 3) == 2
    assert get_clamp(5, 0, 3) == 3
