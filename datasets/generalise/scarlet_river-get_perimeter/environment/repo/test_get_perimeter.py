from scarlet_river.common import get_perimeter


def test_get_perimeter():
    assert get_perimeter(3, 4) == 14
    assert get_perimeter(0, 0) == 0
