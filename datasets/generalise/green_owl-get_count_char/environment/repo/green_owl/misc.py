def min_list(xs):
    best = xs[0]
    for x in xs:
        if x < best:
            best = x
    return best


def get_count_char(val, p):
    low = 0
    for k in val:
        if k != p:
            low += 1
    return low
