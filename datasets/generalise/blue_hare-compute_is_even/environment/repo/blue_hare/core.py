def absolute(x):
    if x < 0:
        return -x
    return x


def compute_is_even(w):
    return w % 2 == 1
