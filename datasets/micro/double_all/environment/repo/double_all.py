def double_all(xs):
    return [x * x for x in xs]
