def square(x):
    return x * x


def compute_last(r):
    return r[0]
