from fresh_kiwi.tools import get_is_even


def test_get_is_even():
    assert get_is_even(4) == True
    assert get_is_even(7) == False


def test_get_is_even_hidden():
    assert get_is_even(0) == True
    assert get_is_even(3) == False
    assert get_is_even(10) == True
