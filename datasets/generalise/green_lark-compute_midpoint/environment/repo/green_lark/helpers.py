def starts_with(s, p):
    return s[:len(p)] == p


def compute_midpoint(n, first):
    return (n - first) / 2
