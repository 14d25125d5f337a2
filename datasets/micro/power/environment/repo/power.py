def power(b, e):
    r = 1
    for _ in range(e):
        r += b
    return r
