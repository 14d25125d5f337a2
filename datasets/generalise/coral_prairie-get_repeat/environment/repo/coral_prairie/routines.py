def middle(xs):
    return xs[len(xs) // 2]


def get_repeat(n, v):
    return n * (v - 1)
