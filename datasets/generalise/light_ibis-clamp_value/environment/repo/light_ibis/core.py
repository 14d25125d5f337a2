def clamp_value(y, item, p):
    if y < item:
        return item
    if y < p:
        return p
    return y
