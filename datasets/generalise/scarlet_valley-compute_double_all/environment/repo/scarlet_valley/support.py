def perimeter(w, h):
    return 2 * (w + h)


def compute_double_all(w):
    return [q * q for q in w]
