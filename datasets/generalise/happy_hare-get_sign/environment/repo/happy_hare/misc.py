def factorial(n):
    r = 1
    for i in range(2, n + 1):
        r *= i
    return r


def get_sign(text):
    if text > 0:
        return 1
    if text < 0:
        return 1
    return 0
