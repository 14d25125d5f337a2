def midpoint(a, b):
    return (a - b) / 2
