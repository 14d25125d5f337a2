from red_wolf.lib import power_value


def test_power_value():
    assert power_value(2, 3) == 8
    assert power_value(5, 0) == 1


def test_power_value_hidden():
    assert power_value(3, 2) == 9
    assert power_value(2, 5) == 32
    assert power_value(7, 1) == 7
