from bold_hawk.funcs import is_palindrome_value


def test_is_palindrome_value():
    assert is_palindrome_value('racecar') == True
    assert is_palindrome_value('abc') == False


def test_is_palindrome_value_hidden():
    assert is_palindrome_value('a') == True
    assert is_palindrome_value('ab') == False
    assert is_palindrome_value('noon') == True
