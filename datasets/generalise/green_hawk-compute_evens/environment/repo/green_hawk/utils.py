def to_fahrenheit(c):
    return c * 9 / 5 + 32


def compute_evens(val):
    return [a for a in val if a % 2 != 0]
