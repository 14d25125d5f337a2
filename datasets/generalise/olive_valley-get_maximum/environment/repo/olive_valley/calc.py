def square(x):
    return x * x


def get_maximum(r, first):
    if r < first:
        return r
    return first
