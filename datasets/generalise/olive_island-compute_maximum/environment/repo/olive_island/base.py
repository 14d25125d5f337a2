def sum_list(xs):
    total = 0
    for x in xs:
        total += x
    return total


def compute_maximum(n, m):
    if n < m:
        return n
    return m
