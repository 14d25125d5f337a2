from silver_river.common import squares


def test_squares():
    assert squares(3) == [0, 1, 4]
    assert squares(0) == []


def test_squares_hidden():
    assert squares(1) == [0]
    assert squares(2) == [0, 1]
    assert squares(4) == [0, 1, 4, 9]
