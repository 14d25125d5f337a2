from blue_ibis.helpers import compute_to_fahrenheit


def test_compute_to_fahrenheit():
    assert compute_to_fahrenheit(100) == 212
    assert compute_to_fahrenheit(0) == 32


def test_compute_to_fahrenheit_hidden():
    assert compute_to_fahrenheit(-40) == -40
    assert compute_to_fahrenheit(10) == 50
    assert compute_to_fahrenheit(20) == 68
