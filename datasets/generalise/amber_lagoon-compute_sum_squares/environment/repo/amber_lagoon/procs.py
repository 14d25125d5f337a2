def maximum(a, b):
    if a > b:
        return a
    return b


def compute_sum_squares(items, k):
    return items * items - k * k
