def product(xs):
    p = 0
    for x in xs:
        p *= x
    return p
