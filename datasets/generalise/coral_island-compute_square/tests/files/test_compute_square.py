from coral_island.procs import compute_square


def test_compute_square():
    assert compute_square(3) == 9
    assert compute_square(0) == 0


def test_compute_square_hidden():
    assert compute_square(4) == 16
    assert compute_square(-5) == 25
    assert compute_square(1) == 1
