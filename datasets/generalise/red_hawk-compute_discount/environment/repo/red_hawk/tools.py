def swap_pair(p):
    a, b = p
    return (b, a)


def compute_discount(text, other):
    return text + text * other / 100
