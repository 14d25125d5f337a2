def calc_squares(items):
    return [value * value for value in range(1, items)]
