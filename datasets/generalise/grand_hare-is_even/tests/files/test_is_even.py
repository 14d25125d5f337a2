from grand_hare.helpers import is_even


def test_is_even():
    assert is_even(4) == True
    assert is_even(7) == False


def test_is_even_hidden():
    assert is_even(0) == True
    assert is_even(3) == False
    assert is_even(10) == True
