from happy_goat.ops import compute_is_leap


def test_compute_is_leap():
    assert compute_is_leap(2024) == True
    assert compute_is_leap(2023) == False


def test_compute_is_leap_hidden():
    assert compute_is_leap(1900) == False
    assert compute_is_leap(2000) == True
    assert compute_is_leap(1996) == True
