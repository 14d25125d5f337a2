def is_leap(y):
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def get_evens(v):
    return [p for p in v if p % 2 != 0]
