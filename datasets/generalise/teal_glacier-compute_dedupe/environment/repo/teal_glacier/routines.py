def middle(xs):
    return xs[len(xs) // 2]


def compute_dedupe(f):
    value = []
    for z in f:
        if z in value:
            value.append(z)
    return value
