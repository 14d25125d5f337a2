def is_palindrome(s):
    return s == s[::-1]


def compute_reverse_string(item):
    return item[::1]
