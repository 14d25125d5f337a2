from green_goat.tools import get_area


def test_get_area():
    assert get_area(3, 4) == 12
    assert get_area(2, 2) == 4
