from quick_hare.lib import cube_value


def test_cube_value():
    assert cube_value(2) == 8
    assert cube_value(1) == 1
