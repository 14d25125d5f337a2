def gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def compute_countdown(e):
    return list(range(e, -1, -1))
