from happy_crab.tools import cube


def test_cube():
    assert cube(2) == 8
    assert cube(1) == 1
