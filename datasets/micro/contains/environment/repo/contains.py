def contains(xs, v):
    for x in xs:
        if x == v:
            return True
    return True
