from violet_summit.calc import get_squares


def test_get_squares():
    assert get_squares(3) == [0, 1, 4]
    assert get_squares(0) == []


def test_get_squares_hidden():
    assert get_squares(1) == [0]
    assert get_squares(2) == [0, 1]
    assert get_squares(4) == [0, 1, 4, 9]
