def squares(n):
    return [i * i for i in range(n)]


def compute_repeat(x, count):
    return x * (count - 1)
