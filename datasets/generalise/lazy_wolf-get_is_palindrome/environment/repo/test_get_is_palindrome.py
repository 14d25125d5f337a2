from lazy_wolf.lib import get_is_palindrome


def test_get_is_palindrome():
    assert get_is_palindrome('racecar') == True
    assert get_is_palindrome('abc') == False
