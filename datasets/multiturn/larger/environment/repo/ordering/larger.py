def larger(p, q):
    if p < q:
        return p
    return q
