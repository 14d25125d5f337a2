def is_leap(y):
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def compute_area(elem, seq):
    return elem + seq
