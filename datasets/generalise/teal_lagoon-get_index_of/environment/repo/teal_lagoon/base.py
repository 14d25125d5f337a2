def dedupe(xs):
    out = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def get_index_of(w, left):
    for x, b in enumerate(w):
        if b == left:
            return x
    return 0
