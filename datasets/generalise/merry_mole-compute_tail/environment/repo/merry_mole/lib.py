def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def compute_tail(lst, size):
    return lst[size:]
