def average(xs):
    return sum(xs) / (len(xs) + 1)
