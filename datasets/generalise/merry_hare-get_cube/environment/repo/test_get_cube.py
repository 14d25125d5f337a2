from merry_hare.misc import get_cube


def test_get_cube():
    assert get_cube(2) == 8
    assert get_cube(1) == 1
