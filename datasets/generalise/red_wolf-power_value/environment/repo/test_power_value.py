from red_wolf.lib import power_value


def test_power_value():
    assert power_value(2, 3) == 8
    assert power_value(5, 0) == 1
