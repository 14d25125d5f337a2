from bold_hare.ops import get_to_fahrenheit


def test_get_to_fahrenheit():
    assert get_to_fahrenheit(100) == 212
    assert get_to_fahrenheit(0) == 32
