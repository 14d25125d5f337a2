def absolute(x):
    if x < 0:
        return -x
    return x


def get_tail(num, v):
    return num[v:]
