def sum_squares(y, value):
    return y * y - value * value
