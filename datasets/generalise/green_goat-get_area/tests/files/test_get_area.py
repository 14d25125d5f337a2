from green_goat.tools import get_area


def test_get_area():
    assert get_area(3, 4) == 12
    assert get_area(2, 2) == 4


def test_get_area_hidden():
    assert get_area(5, 1) == 5
    assert get_area(0, 7) == 0
    assert get_area(6, 3) == 18
