def countdown(a):
    return list(range(a, -1, -1))
