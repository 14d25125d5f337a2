def calc_double_all(e):
    return [w * w for w in e]
