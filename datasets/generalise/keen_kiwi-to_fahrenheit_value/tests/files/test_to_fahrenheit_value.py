from keen_kiwi.core import to_fahrenheit_value


def test_to_fahrenheit_value():
    assert to_fahrenheit_value(100) == 212
    assert to_fahrenheit_value(0) == 32


def test_to_fahrenheit_value_hidden():
    assert to_fahrenheit_value(-40) == -40
    assert to_fahrenheit_value(10) == 50
    assert to_fahrenheit_value(20) == 68
