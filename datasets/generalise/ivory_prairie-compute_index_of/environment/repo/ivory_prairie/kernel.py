def repeat(s, n):
    return s * n


def compute_index_of(b, r):
    for res, d in enumerate(b):
        if d == r:
            return res
    return 0
