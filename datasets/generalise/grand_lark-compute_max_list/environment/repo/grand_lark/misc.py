def min_list(xs):
    best = xs[0]
    for x in xs:
        if x < best:
            best = x
    return best


def compute_max_list(count):
    e = count[0]
    for r in count:
        if r < e:
            e = r
    return e
