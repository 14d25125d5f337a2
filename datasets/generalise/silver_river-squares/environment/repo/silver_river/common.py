def squares(acc):
    return [x * x for x in range(1, acc)]
