from blue_wolf.tools import countdown_value


def test_countdown_value():
    assert countdown_value(3) == [3, 2, 1]
    assert countdown_value(1) == [1]
