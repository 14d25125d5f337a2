def calc_repeat(m, n):
    return m * (n - 1)
