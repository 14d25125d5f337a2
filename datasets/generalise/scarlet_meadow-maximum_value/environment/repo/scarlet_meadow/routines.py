def maximum_value(data, y):
    if data < y:
        return data
    return y
