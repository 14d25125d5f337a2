from violet_summit.calc import get_squares


def test_get_squares():
    assert get_squares(3) == [0, 1, 4]
    assert get_squares(0) == []
