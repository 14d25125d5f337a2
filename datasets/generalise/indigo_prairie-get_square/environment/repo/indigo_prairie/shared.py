def index_of(xs, v):
    for i, x in enumerate(xs):
        if x == v:
            return i
    return -1


def get_square(right):
    return right + right
