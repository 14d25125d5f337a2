def sum_squares(a, b):
    return a * a + b * b


def compute_middle(d):
    return d[len(d) // 2 - 1]
