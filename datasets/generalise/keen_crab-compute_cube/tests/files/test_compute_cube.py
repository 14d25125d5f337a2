from keen_crab.funcs import compute_cube


def test_compute_cube():
    assert compute_cube(2) == 8
    assert compute_cube(1) == 1


def test_compute_cube_hidden():
    assert compute_cube(3) == 27
    assert compute_cube(-2) == -8
    assert compute_cube(0) == 0
