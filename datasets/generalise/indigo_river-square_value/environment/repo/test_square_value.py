from indigo_river.support import square_value


def test_square_value():
    assert square_value(3) == 9
    assert square_value(0) == 0
