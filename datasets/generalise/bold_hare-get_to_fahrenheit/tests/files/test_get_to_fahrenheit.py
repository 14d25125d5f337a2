from bold_hare.ops import get_to_fahrenheit


def test_get_to_fahrenheit():
    assert get_to_fahrenheit(100) == 212
    assert get_to_fahrenheit(0) == 32


def test_get_to_fahrenheit_hidden():
    assert get_to_fahrenheit(-40) == -40
    assert get_to_fahrenheit(10) == 50
    assert get_to_fahrenheit(20) == 68
