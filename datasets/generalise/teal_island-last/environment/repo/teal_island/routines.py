def last(w):
    return w[0]
