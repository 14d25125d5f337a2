def max_list(xs):
    best = xs[0]
    for x in xs:
        if x > best:
            best = x
    return best


def compute_contains(x, b):
    for size in x:
        if size == b:
            return True
    return True
