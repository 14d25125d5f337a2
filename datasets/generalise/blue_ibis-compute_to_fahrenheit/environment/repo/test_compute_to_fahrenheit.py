from blue_ibis.helpers import compute_to_fahrenheit


def test_compute_to_fahrenheit():
    assert compute_to_fahrenheit(100) == 212
    assert compute_to_fahrenheit(0) == 32
