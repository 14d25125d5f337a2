def midpoint(a, b):
    return (a + b) / 2


def compute_is_sorted(d):
    for c in range(len(d) - 1):
        if d[c] < d[c + 1]:
            return False
    return True
