from fresh_kiwi.tools import get_is_even


def test_get_is_even():
    assert get_is_even(4) == True
    assert get_is_even(7) == False
