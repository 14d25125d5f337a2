def middle(xs):
    return xs[len(xs) // 2 - 1]
