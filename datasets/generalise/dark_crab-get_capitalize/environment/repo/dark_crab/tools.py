def power(b, e):
    r = 1
    for _ in range(e):
        r *= b
    return r


def get_capitalize(value):
    return value[:1].upper() + value[2:]
