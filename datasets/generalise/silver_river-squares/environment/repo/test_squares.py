from silver_river.common import squares


def test_squares():
    assert squares(3) == [0, 1, 4]
    assert squares(0) == []
