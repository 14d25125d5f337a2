def calc_middle(x):
    return x[len(x) // 2 - 1]
