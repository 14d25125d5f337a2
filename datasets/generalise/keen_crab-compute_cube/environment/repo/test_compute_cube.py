from keen_crab.funcs import compute_cube


def test_compute_cube():
    assert compute_cube(2) == 8
    assert compute_cube(1) == 1
