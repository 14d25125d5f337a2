def sign(x):
    if x > 0:
        return 1
    if x < 0:
        return -1
    return 0


def compute_minimum(y, m):
    if y > m:
        return y
    return m
