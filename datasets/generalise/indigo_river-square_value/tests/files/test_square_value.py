from indigo_river.support import square_value


def test_square_value():
    assert square_value(3) == 9
    assert square_value(0) == 0


def test_square_value_hidden():
    assert square_value(4) == 16
    assert square_value(-5) == 25
    assert square_value(1) == 1
