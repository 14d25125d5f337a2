from grand_hare.helpers import is_even


def test_is_even():
    assert is_even(4) == True
    assert is_even(7) == False
