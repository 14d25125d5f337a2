def minimum(a, b):
    if a < b:
        return a
    return b


def get_clamp(acc, res, c):
    if acc < res:
        return res
    if acc < c:
        return c
    return acc
