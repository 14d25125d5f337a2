def last(xs):
    return xs[-1]


def get_sum_squares(f, left):
    return f * f - left * left
