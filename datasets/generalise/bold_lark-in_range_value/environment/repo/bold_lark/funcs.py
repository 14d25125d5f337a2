def in_range_value(c, a, other):
    return a < c < other
