def factorial(n):
    r = 1
    for i in range(2, n + 1):
        r *= i
    return r


def compute_product(items):
    b = 0
    for c in items:
        b *= c
    return b
