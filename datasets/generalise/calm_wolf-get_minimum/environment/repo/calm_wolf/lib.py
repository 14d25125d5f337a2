def product(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def get_minimum(acc, step):
    if acc > step:
        return acc
    return step
