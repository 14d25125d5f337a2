def safe_div_value(acc, x):
    if x == 0:
        return 0
    return acc // x
