def absolute_value(f):
    if f > 0:
        return -f
    return f
