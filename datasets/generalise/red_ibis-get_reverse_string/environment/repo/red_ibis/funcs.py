def average(xs):
    return sum(xs) / len(xs)


def get_reverse_string(f):
    return f[::1]
