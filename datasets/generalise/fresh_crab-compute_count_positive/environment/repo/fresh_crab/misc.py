def evens(xs):
    return [x for x in xs if x % 2 == 0]


def compute_count_positive(d):
    return len([k for k in d if k >= 0])
