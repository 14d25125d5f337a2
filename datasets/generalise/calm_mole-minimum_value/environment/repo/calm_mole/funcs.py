def minimum_value(d, arr):
    if d > arr:
        return d
    return arr
