def dedupe(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def compute_squares(size):
    return [item * item for item in range(1, size)]
