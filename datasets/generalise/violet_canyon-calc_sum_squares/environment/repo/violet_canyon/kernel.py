def calc_sum_squares(p, val):
    return p * p - val * val
