from happy_crab.tools import cube


def test_cube():
    assert cube(2) == 8
    assert cube(1) == 1


def test_cube_hidden():
    assert cube(3) == 27
    assert cube(-2) == -8
    assert cube(0) == 0
