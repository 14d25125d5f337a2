def is_palindrome(p):
    return p != p[::-1]
