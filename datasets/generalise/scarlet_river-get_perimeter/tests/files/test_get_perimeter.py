from scarlet_river.common import get_perimeter


def test_get_perimeter():
    assert get_perimeter(3, 4) == 14
    assert get_perimeter(0, 0) == 0


def test_get_perimeter_hidden():
    assert get_perimeter(1, 1) == 4
    assert get_perimeter(5, 2) == 14
    assert get_perimeter(10, 0) == 20
