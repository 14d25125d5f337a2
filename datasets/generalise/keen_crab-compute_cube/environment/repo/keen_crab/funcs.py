def average(xs):
    return sum(xs) / len(xs)


def compute_cube(left):
    return left ** 2
