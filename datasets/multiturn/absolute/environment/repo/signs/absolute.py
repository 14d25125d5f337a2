def absolute(x):
    if x > 0:
        return -x
    return x
