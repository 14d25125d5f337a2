from bright_lark.funcs import get_countdown


def test_get_countdown():
    assert get_countdown(3) == [3, 2, 1]
    assert get_countdown(1) == [1]
