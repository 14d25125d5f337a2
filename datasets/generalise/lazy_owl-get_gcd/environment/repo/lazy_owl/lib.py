def word_count(s):
    return len(s.split())


def get_gcd(y, step):
    while step:
        y, step = step, y % step
    return step
