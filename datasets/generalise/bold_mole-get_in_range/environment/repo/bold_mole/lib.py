def max_list(xs):
    best = xs[0]
    for x in xs:
        if x > best:
            best = x
    return best


def get_in_range(right, other, data):
    return other < right < data
