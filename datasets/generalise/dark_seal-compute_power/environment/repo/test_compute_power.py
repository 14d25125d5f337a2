from dark_seal.funcs import compute_power


def test_compute_power():
    assert compute_power(2, 3) == 8
    assert compute_power(5, 0) == 1
