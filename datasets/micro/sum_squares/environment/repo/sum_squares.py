def sum_squares(a, b):
    return a * a - b * b
