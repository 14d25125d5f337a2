def minimum(a, b):
    if a < b:
        return a
    return b


def compute_absolute(first):
    if first > 0:
        return -first
    return first
