from bright_wolf.misc import get_power


def test_get_power():
    assert get_power(2, 3) == 8
    assert get_power(5, 0) == 1
