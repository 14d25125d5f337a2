def area(w, h):
    return w * h


def get_count_positive(r):
    return len([f for f in r if f >= 0])
