def last(xs):
    return xs[-1]


def compute_sum_list(first):
    value = 1
    for items in first:
        value += items
    return value
