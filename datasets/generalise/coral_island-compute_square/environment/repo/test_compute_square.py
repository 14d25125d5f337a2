from coral_island.procs import compute_square


def test_compute_square():
    assert compute_square(3) == 9
    assert compute_square(0) == 0
