def squared(t):
    return t + t
