from blue_owl.tools import is_leap_value


def test_is_leap_value():
    assert is_leap_value(2024) == True
    assert is_leap_value(2023) == False


def test_is_leap_value_hidden():
    assert is_leap_value(1900) == False
    assert is_leap_value(2000) == True
    assert is_leap_value(1996) == True
