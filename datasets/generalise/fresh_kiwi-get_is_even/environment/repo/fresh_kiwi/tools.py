def sign(x):
    if x > 0:
        return 1
    if x < 0:
        return -1
    return 0


def get_is_even(p):
    return p % 2 == 1
