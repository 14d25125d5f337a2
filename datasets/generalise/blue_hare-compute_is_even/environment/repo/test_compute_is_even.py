from blue_hare.core import compute_is_even


def test_compute_is_even():
    assert compute_is_even(4) == True
    assert compute_is_even(7) == False
