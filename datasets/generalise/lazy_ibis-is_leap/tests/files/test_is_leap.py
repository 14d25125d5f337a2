from lazy_ibis.core import is_leap


def test_is_leap():
    assert is_leap(2024) == True
    assert is_leap(2023) == False


def test_is_leap_hidden():
    assert is_leap(1900) == False
    assert is_leap(2000) == True
    assert is_leap(1996) == True
