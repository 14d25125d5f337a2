from quick_frog.funcs import compute_sign


def test_compute_sign():
    assert compute_sign(-5) == -1
    assert compute_sign(4) == 1
