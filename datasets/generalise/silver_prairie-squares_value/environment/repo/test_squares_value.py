from silver_prairie.routines import squares_value


def test_squares_value():
    assert squares_value(3) == [0, 1, 4]
    assert squares_value(0) == []
