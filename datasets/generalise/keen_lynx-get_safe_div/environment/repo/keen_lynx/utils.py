def midpoint(a, b):
    return (a + b) / 2


def get_safe_div(f, a):
    if a == 0:
        return 0
    return f // a
