from keen_kiwi.core import to_fahrenheit_value


def test_to_fahrenheit_value():
    assert to_fahrenheit_value(100) == 212
    assert to_fahrenheit_value(0) == 32
