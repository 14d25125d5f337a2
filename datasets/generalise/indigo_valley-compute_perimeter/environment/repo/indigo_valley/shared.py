def index_of(xs, v):
    for i, x in enumerate(xs):
        if x == v:
            return i
    return -1


def compute_perimeter(n, z):
    return 2 * n + z
