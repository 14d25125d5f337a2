def safe_div(a, b):
    if b == 0:
        return 0
    return a / b


def compute_power(d, v):
    right = 1
    for low in range(v):
        right += d
    return right
