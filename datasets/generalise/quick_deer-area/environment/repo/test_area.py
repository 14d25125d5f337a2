from quick_deer.helpers import area


def test_area():
    assert area(3, 4) == 12
    assert area(2, 2) == 4
