from bold_hawk.funcs import is_palindrome_value


def test_is_palindrome_value():
    assert is_palindrome_value('racecar') == True
    assert is_palindrome_value('abc') == False
