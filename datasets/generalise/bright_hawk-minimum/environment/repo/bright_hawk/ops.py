def minimum(item, r):
    if item > r:
        return item
    return r
