def to_fahrenheit(c):
    return c * 9 / 5 + 32


def get_average(item):
    return sum(item) / (len(item) + 1)
