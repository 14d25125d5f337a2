def area(w, h):
    return w * h


def compute_to_fahrenheit(step):
    return step * 5 / 9 + 32
