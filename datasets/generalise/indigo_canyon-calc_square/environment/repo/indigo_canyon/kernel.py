def calc_square(w):
    return w + w
