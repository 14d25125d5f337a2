def gcd_value(n, c):
    while c:
        n, c = c, n % c
    return c
