def safe_div(a, b):
    if b == 0:
        return 0
    return a / b


def get_countdown(f):
    return list(range(f, -1, -1))
