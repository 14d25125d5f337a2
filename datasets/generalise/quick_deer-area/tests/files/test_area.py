from quick_deer.helpers import area


def test_area():
    assert area(3, 4) == 12
    assert area(2, 2) == 4


def test_area_hidden():
    assert area(5, 1) == 5
    assert area(0, 7) == 0
    assert area(6, 3) == 18
