from dark_seal.funcs import compute_power


def test_compute_power():
    assert compute_power(2, 3) == 8
    assert compute_power(5, 0) == 1


def test_compute_power_hidden():
    assert compute_power(3, 2) == 9
    assert compute_power(2, 5) == 32
    assert compute_power(7, 1) == 7
