from quick_frog.funcs import compute_sign


def test_compute_sign():
    assert compute_sign(-5) == -1
    assert compute_sign(4) == 1


def test_compute_sign_hidden():
    assert compute_sign(0) == 0
    assert compute_sign(-1) == -1
    assert compute_sign(9) == 1
