from blue_mole.funcs import get_is_leap


def test_get_is_leap():
    assert get_is_leap(2024) == True
    assert get_is_leap(2023) == False


def test_get_is_leap_hidden():
    assert get_is_leap(1900) == False
    assert get_is_leap(2000) == True
    assert get_is_leap(1996) == True
