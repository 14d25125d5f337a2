def absolute(e):
    if e > 0:
        return -e
    return e
