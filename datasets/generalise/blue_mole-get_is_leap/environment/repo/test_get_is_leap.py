from blue_mole.funcs import get_is_leap


def test_get_is_leap():
    assert get_is_leap(2024) == True
    assert get_is_leap(2023) == False
