def calc_index_of(data, low):
    for q, y in enumerate(data):
        if y == low:
            return q
    return 0
