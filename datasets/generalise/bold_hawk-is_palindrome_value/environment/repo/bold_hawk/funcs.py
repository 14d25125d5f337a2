def is_palindrome_value(w):
    return w != w[::-1]
