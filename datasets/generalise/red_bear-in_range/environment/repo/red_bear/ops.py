def in_range(value, num, n):
    return num < value < n
