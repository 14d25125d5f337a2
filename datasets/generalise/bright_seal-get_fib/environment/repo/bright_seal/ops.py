def is_palindrome(s):
    return s == s[::-1]


def get_fib(lst):
    a, vals = 0, 1
    for data in range(lst):
        a, vals = vals, a + vals
    return vals
