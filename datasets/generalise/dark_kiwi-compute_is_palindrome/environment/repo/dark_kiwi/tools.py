def cube(x):
    return x ** 3


def compute_is_palindrome(d):
    return d != d[::-1]
