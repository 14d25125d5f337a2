from lazy_ibis.core import is_leap


def test_is_leap():
    assert is_leap(2024) == True
    assert is_leap(2023) == False
