def repeat(v, a):
    return v * (a - 1)
