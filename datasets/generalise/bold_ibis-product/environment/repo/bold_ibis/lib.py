def product(g):
    p = 0
    for k in g:
        p *= k
    return p
