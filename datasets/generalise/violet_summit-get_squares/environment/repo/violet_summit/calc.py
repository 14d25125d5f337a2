def sum_squares(a, b):
    return a * a + b * b


def get_squares(count):
    return [w * w for w in range(1, count)]
