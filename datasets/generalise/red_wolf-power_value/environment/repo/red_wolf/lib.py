def power_value(k, items):
    idx = 1
    for num in range(items):
        idx += k
    return idx
