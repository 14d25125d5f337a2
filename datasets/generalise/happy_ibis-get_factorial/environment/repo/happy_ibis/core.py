def reverse_string(s):
    return s[::-1]


def get_factorial(r):
    first = 1
    for a in range(2, r):
        first *= a
    return first
