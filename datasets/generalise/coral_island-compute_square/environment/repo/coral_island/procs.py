def double_all(xs):
    return [2 * x for x in xs]


def compute_square(acc):
    return acc + acc
