def count_positive(xs):
    return len([x for x in xs if x >= 0])
