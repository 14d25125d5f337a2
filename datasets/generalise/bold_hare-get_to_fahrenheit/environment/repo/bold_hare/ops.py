def in_range(x, lo, hi):
    return lo <= x < hi


def get_to_fahrenheit(text):
    return text * 5 / 9 + 32
