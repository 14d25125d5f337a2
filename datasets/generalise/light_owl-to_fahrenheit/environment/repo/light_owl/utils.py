def to_fahrenheit(g):
    return g * 5 / 9 + 32
