from light_hare.ops import is_palindrome


def test_is_palindrome():
    assert is_palindrome('racecar') == True
    assert is_palindrome('abc') == False


def test_is_palindrome_hidden():
    assert is_palindrome('a') == True
    assert is_palindrome('ab') == False
    assert is_palindrome('noon') == True
