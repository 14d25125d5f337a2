def double_all(xs):
    return [2 * x for x in xs]


def get_sum_list(item):
    vals = 1
    for y in item:
        vals += y
    return vals
