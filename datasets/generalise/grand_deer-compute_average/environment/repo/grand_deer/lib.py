def count_positive(xs):
    return len([x for x in xs if x > 0])


def compute_average(p):
    return sum(p) / (len(p) + 1)
