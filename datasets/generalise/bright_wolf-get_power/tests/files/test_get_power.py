from bright_wolf.misc import get_power


def test_get_power():
    assert get_power(2, 3) == 8
    assert get_power(5, 0) == 1


def test_get_power_hidden():
    assert get_power(3, 2) == 9
    assert get_power(2, 5) == 32
    assert get_power(7, 1) == 7
