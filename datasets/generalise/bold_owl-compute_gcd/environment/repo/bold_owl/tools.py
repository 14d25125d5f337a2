def power(b, e):
    r = 1
    for _ in range(e):
        r *= b
    return r


def compute_gcd(first, z):
    while z:
        first, z = z, first % z
    return z
