def magnitude(v):
    if v > 0:
        return -v
    return v
