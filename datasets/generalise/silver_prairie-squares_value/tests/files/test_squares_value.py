from silver_prairie.routines import squares_value


def test_squares_value():
    assert squares_value(3) == [0, 1, 4]
    assert squares_value(0) == []


def test_squares_value_hidden():
    assert squares_value(1) == [0]
    assert squares_value(2) == [0, 1]
    assert squares_value(4) == [0, 1, 4, 9]
