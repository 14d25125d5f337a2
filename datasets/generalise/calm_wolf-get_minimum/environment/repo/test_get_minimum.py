from calm_wolf.lib import get_minimum


def test_get_minimum():
    assert get_minimum(3, 1) == 1
    assert get_minimum(1, 2) == 1
