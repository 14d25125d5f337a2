from blue_hare.core import compute_is_even


def test_compute_is_even():
    assert compute_is_even(4) == True
    assert compute_is_even(7) == False


def test_compute_is_even_hidden():
    assert compute_is_even(0) == True
    assert compute_is_even(3) == False
    assert compute_is_even(10) == True
