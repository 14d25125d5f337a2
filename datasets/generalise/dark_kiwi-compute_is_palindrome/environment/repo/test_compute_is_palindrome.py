from dark_kiwi.tools import compute_is_palindrome


def test_compute_is_palindrome():
    assert compute_is_palindrome('racecar') == True
    assert compute_is_palindrome('abc') == False
