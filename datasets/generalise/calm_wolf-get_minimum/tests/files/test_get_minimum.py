from calm_wolf.lib import get_minimum


def test_get_minimum():
    assert get_minimum(3, 1) == 1
    assert get_minimum(1, 2) == 1


def test_get_minimum_hidden():
    assert get_minimum(5, 9) == 5
    assert get_minimum(-1, -4) == -4
    assert get_minimum(2, 2) == 2
