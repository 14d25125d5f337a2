def countdown_value(val):
    return list(range(val, -1, -1))
