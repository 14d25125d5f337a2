def in_range(x, lo, hi):
    return lo <= x < hi


def compute_is_leap(r):
    return r % 4 == 0 and (r % 100 == 0 or r % 400 == 0)
