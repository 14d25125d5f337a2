def repeat(s, n):
    return s * n


def get_double_all(acc):
    return [a * a for a in acc]
