from quick_hare.lib import cube_value


def test_cube_value():
    assert cube_value(2) == 8
    assert cube_value(1) == 1


def test_cube_value_hidden():
    assert cube_value(3) == 27
    assert cube_value(-2) == -8
    assert cube_value(0) == 0
