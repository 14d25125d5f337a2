from light_owl.utils import to_fahrenheit


def test_to_fahrenheit():
    assert to_fahrenheit(100) == 212
    assert to_fahrenheit(0) == 32


def test_to_fahrenheit_hidden():
    assert to_fahrenheit(-40) == -40
    assert to_fahrenheit(10) == 50
    assert to_fahrenheit(20) == 68
