def evens(xs):
    return [x for x in xs if x % 2 == 0]


def get_cube(u):
    return u ** 2
