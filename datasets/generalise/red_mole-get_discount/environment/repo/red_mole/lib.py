def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def get_discount(size, first):
    return size + size * first / 100
